"""The framework settings every GPU step gets, so a job's memory on the GPU is what it needs.

Left alone, JAX preallocates 75 % of the GPU it sees at start and TensorFlow maps nearly all
of it: NVML then shows that much for the process whatever the job uses, its history says it
needs most of a GPU, and it is never packed; packed on a share, it grabs the share's 75 % and
leaves nothing to grow into. With these settings both allocate as they go, so a profiling run
(every whole-GPU run is measured: `slurm_plugin.history_recorder`) and a packed run show
their real use.

- ``XLA_PYTHON_CLIENT_PREALLOCATE=false``: JAX (XLA's client) allocates on demand.
- ``TF_FORCE_GPU_ALLOW_GROWTH=true``: TensorFlow grows its memory as needed.

PyTorch needs none: its caching allocator reserves on demand (the reserve it keeps beyond what
it allocated is read apart, `agent.memory_sources.TorchProbe.report`, `packer.need`).

The agent answers them with the step's isolation; the SPANK plugin sets them only where the
job's own environment does not have them (``spank_setenv(..., overwrite=0)``): a user who set
``XLA_PYTHON_CLIENT_PREALLOCATE=true`` or ``XLA_PYTHON_CLIENT_MEM_FRACTION`` keeps that. The
SPANK plugin's list of these names (``framework_vars`` in spank/gpupack_spank.c) is the same
as this one (a unit test compares them).
"""
from __future__ import annotations

FRAMEWORK_ENV: dict[str, str] = {
    "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",
}


def framework_env(gpu_index: int) -> dict[str, str]:
    """The settings for a step on GPU ``gpu_index`` (-1: a step with no GPU gets none)."""
    return dict(FRAMEWORK_ENV) if gpu_index >= 0 else {}
