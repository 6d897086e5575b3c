"""Where the node agent keeps its desired MIG state: ``mig-desired.json`` in its own home
folder (root's, beside its state; no job writes there), read back by ``gpupack mig assert``."""
from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from mig.desired import GpuLayout, NodeDesired
from slurm_plugin.agent.paths import AgentPaths
from store.jsonfile import write_json_atomic

log = logging.getLogger(__name__)


def desired_path(state_dir: Path, node: str) -> Path:
    """The desired-state file of ``node``'s agent under its state folder."""
    return AgentPaths(Path(state_dir), node).mig_desired


class DesiredRecord:
    """Each GPU's desired layout as the agent last decided it; every change is written at once
    (mode 0644: anyone on the node may assert it, only the agent writes it)."""

    def __init__(self, path: Path | None, node: str, clock: Callable[[], float]):
        """``path`` None: kept in memory only (a replay, a test)."""
        self.path = Path(path) if path is not None else None
        self.node = node
        self.clock = clock
        self.gpus: dict[int, GpuLayout] = {}

    def get(self, gpu_index: int) -> GpuLayout | None:
        return self.gpus.get(gpu_index)

    def set(self, layout: GpuLayout) -> None:
        self.gpus[layout.gpu_index] = layout
        if self.path is None:
            return
        try:
            write_json_atomic(self.path, NodeDesired(self.node, dict(self.gpus), self.clock()).to_dict(),
                              mode=0o644)
        except OSError as exc:  # the layout itself is applied; only its record is missing
            log.error("cannot record the desired MIG layout in %s: %s", self.path, exc)


def read_desired(path: Path) -> NodeDesired:
    """The desired state recorded at ``path``; OSError when it cannot be read, ValueError when
    it is not a desired-state record."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON ({exc})") from exc
    return NodeDesired.from_dict(data)
