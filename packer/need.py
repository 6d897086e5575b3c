"""What a run needed, beside what NVML saw of it. Pure.

NVML's per-process figure is what the framework's allocator *reserved*: PyTorch's caching
allocator keeps freed blocks, JAX preallocates 75 % of the GPU at start, TensorFlow grows to
all of it. Sized on that, such a job never fits a share. Where the job's allocator says
what it *allocated* at most (PyTorch's ``max_memory_allocated``, reported by
`slurm_plugin.agent.memory_sources.TorchProbe.report`), the run's need is that peak plus
:data:`NEED_OVERHEAD_BYTES` (the CUDA context and the allocator's rounding, which the
allocated figure leaves out), never above NVML's figure (a job cannot need more than it
held, and what it says of itself cannot size it above what was seen). The packer's own
headroom (`[packer] headroom_fraction`, `min_headroom_gib`) comes on top, as for any peak.
"""
from __future__ import annotations

#: the CUDA context (about 300-500 MiB on current GPUs) and the allocator's block rounding
NEED_OVERHEAD_BYTES = 512 * 1024 * 1024


def need_bytes(nvml_peak_bytes: int, alloc_peak_bytes: int | None) -> int | None:
    """The run's need from its allocator's peak; None when the allocator said nothing (or
    NVML saw nothing: an untouched run needs 0, which its peak says already)."""
    if alloc_peak_bytes is None or nvml_peak_bytes <= 0 or alloc_peak_bytes < 0:
        return None
    return min(int(nvml_peak_bytes), int(alloc_peak_bytes) + NEED_OVERHEAD_BYTES)
