"""Exclusive-process compute mode under the node's MPS daemons.

The MPS limits hold only for processes that go through the daemon's server; a job's process
that unsets ``CUDA_MPS_PIPE_DIRECTORY`` would otherwise run on the GPU beside the MPS
clients, unfenced. With the device in EXCLUSIVE_PROCESS compute mode (NVIDIA's MPS
documentation: set it before the daemon starts) it allows one CUDA context, the MPS
server's, so such a process is refused by the driver ("all CUDA-capable devices are busy or
unavailable"), whatever its environment says.

The agent sets the mode (NVML, root) of each device that gets an MPS daemon (a whole GPU,
or the MIG device of a GPU instance: on a MIG-enabled GPU the mode belongs to each MIG
device) when its first MPS share starts, and puts DEFAULT back when its last share ends.
A mark (``<mps root>/<key>/compute-mode.json``) remembers which devices it changed, so an
agent that restarts with no MPS share left on one puts it back too, and a mode an
administrator set on another device is left alone. A refusal (NO_PERMISSION: the agent is
not root) refuses the isolation: a packed MPS job never runs without the fence.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

from mig.backend import COMPUTE_DEFAULT, COMPUTE_EXCLUSIVE_PROCESS
from mig.errors import MigError, NotFoundError
from slurm_plugin.agent.paths import AgentError

log = logging.getLogger(__name__)

MARK = "compute-mode.json"


class ExclusiveMode:
    """The compute mode of the devices under MPS daemons (``root/<key>/``, the daemons' folders)."""

    def __init__(self, backend, root: Path):
        self.backend = backend
        self.root = Path(root)

    def _mark(self, key: str) -> Path:
        return self.root / key / MARK

    def hold(self, key: str, gpu_index: int, gi_id: int | None) -> None:
        """The device in EXCLUSIVE_PROCESS (read back); AgentError when NVML refuses."""
        where = f"GPU {gpu_index}" + (f" GPU instance {gi_id}" if gi_id is not None else "")
        mark = self._mark(key)
        fresh = not mark.exists()
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.write_text(json.dumps({"gpu": gpu_index, "gi": gi_id}))  # before: a crash after still undoes it
        try:
            if self.backend.compute_mode(gpu_index, gi_id) != COMPUTE_EXCLUSIVE_PROCESS:
                self.backend.set_compute_mode(gpu_index, gi_id, COMPUTE_EXCLUSIVE_PROCESS)
            got = self.backend.compute_mode(gpu_index, gi_id)
        except MigError as exc:
            if fresh:
                mark.unlink(missing_ok=True)  # nothing changed: nothing to put back
            raise AgentError(f"{where}: cannot set exclusive-process compute mode for its MPS share "
                             f"({exc}); without it a process outside MPS would run beside the packed "
                             f"jobs, so the share is refused") from exc
        if got != COMPUTE_EXCLUSIVE_PROCESS:
            raise AgentError(f"{where}: compute mode is {got} after setting EXCLUSIVE_PROCESS; the MPS "
                             f"share is refused")

    def release(self, key: str) -> str | None:
        """DEFAULT back on the device of ``key`` when the agent changed it; what was done."""
        mark = self._mark(key)
        try:
            where = json.loads(mark.read_text())
            gpu_index, gi_id = int(where["gpu"]), where.get("gi")
        except (OSError, ValueError, KeyError, TypeError):
            return None
        try:
            self.backend.set_compute_mode(gpu_index, gi_id, COMPUTE_DEFAULT)
        except NotFoundError:
            pass  # its MIG instance is gone (a new one starts at DEFAULT)
        except MigError as exc:
            log.error("MPS device %s: cannot put the compute mode back to DEFAULT: %s", key, exc)
            return f"MPS device {key}: compute mode not put back to DEFAULT: {exc}"
        mark.unlink(missing_ok=True)
        log.info("MPS device %s: compute mode back to DEFAULT (no MPS share left)", key)
        return f"MPS device {key}: compute mode back to DEFAULT"

    def sweep(self, wanted: Iterable[str]) -> list[str]:
        """DEFAULT back on every device the agent marked that no MPS share uses (after a restart)."""
        keep = set(wanted)
        if not self.root.is_dir():
            return []
        marked = sorted(p.parent.name for p in self.root.glob(f"*/{MARK}"))
        return [done for key in marked if key not in keep and (done := self.release(key))]
