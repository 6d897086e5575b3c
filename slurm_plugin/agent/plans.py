"""Per-node plans the helper sends (queue layouts, MPS percentages), each with a generation
number (the helper's clock in milliseconds when it made the plan): an agent refuses a plan older
than the newest it took, so a delayed or replayed request cannot undo a newer plan."""
from __future__ import annotations

import json
import threading
from pathlib import Path

from slurm_plugin.agent.state import write_json_atomic


class StalePlan(ValueError):
    """A plan older than the newest one taken."""


class Generations:
    """The newest generation taken per kind of plan (in memory; the MPS plan keeps its own)."""

    def __init__(self) -> None:
        self._newest: dict[str, int] = {}
        self._lock = threading.Lock()

    def take(self, kind: str, generation: int) -> None:
        with self._lock:
            newest = self._newest.get(kind, -1)
            if generation < newest:
                raise StalePlan(f"{kind} generation {generation} is older than {newest}, which this agent has")
            self._newest[kind] = generation


class MpsPlanFile:
    """The helper's MPS percentages for this node's jobs, kept in the agent's own folder
    (``{"generation": g, "plan": {gpu: {job: percent}}}``), read when a job's step starts."""

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
            raise ValueError("an MPS plan is {gpu: {job: percent}}")
        with self._lock:
            newest = int(self.read().get("generation", -1))
            if generation < newest:
                raise StalePlan(f"MPS plan generation {generation} is older than {newest}, which this agent has")
            write_json_atomic(self.path, {"generation": generation, "plan": plan})
