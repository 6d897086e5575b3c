"""The MIG fence of a job: the capability device nodes its steps may open.

A process uses a MIG device only if it can open that instance's capability nodes
(:mod:`gpus.nvml.caps`). The SPANK plugin, in each task before privileges drop, puts a
fresh read-only folder over the driver's ``nvidia-caps`` folder holding only the job's own
nodes (its GPU instance's and compute instance's), in a mount namespace of its own: a job
whose user points ``CUDA_VISIBLE_DEVICES`` at another job's slice cannot open that slice.
The agent names those nodes here, read from the driver's proc files as on a real node (for
the simulated GPU, from its driver folder); the plugin reads them in the line
``FENCE <node>[,<node>] <folder>`` (:func:`slurm_plugin.agent.isolation.answer_lines`).
"""
from __future__ import annotations

from dataclasses import dataclass

from gpus.nvml.caps import CapError, DriverFiles
from slurm_plugin.agent.paths import AgentError
from slurm_plugin.agent.state import Assignment


@dataclass(frozen=True)
class Fence:
    directory: str  # the driver's capability node folder (/dev/nvidia-caps)
    allowed: tuple[str, ...]  # the node names in it the job may open

    def to_dict(self) -> dict:
        return {"directory": self.directory, "allowed": list(self.allowed)}


def fence_for(driver: DriverFiles, backend, a: Assignment) -> Fence | None:
    """The fence of a job on a MIG device (None on a whole GPU without MIG); AgentError when
    the driver lists no capability for its instance: the step must not run unfenced."""
    if a.gi_id is None or a.gpu_index < 0:
        return None
    ci = next((i.ci_id for i in backend.list_instances(a.gpu_index) if i.gi_id == a.gi_id), None)
    try:
        nodes = driver.mig_devices(a.gpu_index, a.gi_id, ci)
    except CapError as exc:
        raise AgentError(f"cannot fence job {a.job_id} to its MIG instance (GPU {a.gpu_index}, GPU "
                         f"instance {a.gi_id}): {exc}") from exc
    return Fence(str(driver.dev_caps), tuple(n.name for n in nodes))
