"""Per-node plans the helper sends (queue layouts, MPS percentages), each with a generation
number (the helper's clock in milliseconds when it made the plan): an agent refuses a plan older
than the newest it took, so a delayed or replayed request cannot undo a newer plan."""
from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from slurm_plugin.agent.state import write_json_atomic

log = logging.getLogger(__name__)


class StalePlan(ValueError):
    """A plan older than the newest one taken."""


class Generations:
    """The newest generation taken per kind of plan (``layout``, ``jobs``; the MPS plan keeps
    its own in its file), kept in ``path`` (replaced atomically, fsync-ed) so that a restarted
    agent still refuses a plan older than one it took before. An unreadable file is logged and
    counts as none taken (the helper's next plan is newer than anything it sent before)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._newest: dict[str, int] = self._load()
        self._lock = threading.Lock()

    def _load(self) -> dict[str, int]:
        if self.path is None:
            return {}
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("%s unreadable (%s): no plan generation known, the next one is taken", self.path, exc)
            return {}
        if not isinstance(doc, dict):
            log.warning("%s is not an object: no plan generation known", self.path)
            return {}
        newest = {str(k): v for k, v in doc.items() if isinstance(v, int) and not isinstance(v, bool)}
        if len(newest) != len(doc):
            log.warning("%s: %d entries that are not integers skipped", self.path, len(doc) - len(newest))
        return newest

    def newest(self, kind: str) -> int:
        with self._lock:
            return self._newest.get(kind, -1)

    def take(self, kind: str, generation: int) -> None:
        with self._lock:
            newest = self._newest.get(kind, -1)
            if generation < newest:
                raise StalePlan(f"{kind} generation {generation} is older than {newest}, which this agent has")
            if generation > newest:
                self._newest[kind] = generation
                if self.path is not None:
                    write_json_atomic(self.path, dict(self._newest), fsync=True)


class MpsPlanFile:
    """The helper's MPS percentages for this node's jobs, kept in the agent's own folder
    (``{"generation": g, "plan": {device: {job: percent}}}``, the device a GPU ``"0"`` or an
    MPS-shared MIG instance ``"0@profile@start"``: :func:`packer.mps.device_key`), read when a
    job's step starts."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def read(self) -> dict:
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {"generation": -1, "plan": {}}
        return doc if isinstance(doc, dict) else {"generation": -1, "plan": {}}

    def write(self, plan: dict, generation: int) -> None:
        if not isinstance(plan, dict) or not all(isinstance(v, dict) for v in plan.values()):
            raise ValueError("an MPS plan is {device: {job: percent}}")
        with self._lock:
            newest = int(self.read().get("generation", -1))
            if generation < newest:
                raise StalePlan(f"MPS plan generation {generation} is older than {newest}, which this agent has")
            write_json_atomic(self.path, {"generation": generation, "plan": plan})
