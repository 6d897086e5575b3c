"""What one simulator run gives back (:class:`SimResult`); :mod:`.metrics` summarises it."""
from __future__ import annotations

from dataclasses import dataclass, field

from simulator.config import SimConfig
from simulator.state import Job


@dataclass
class SimResult:
    policy: str
    predictor: bool
    config: SimConfig
    jobs: list[Job]
    skipped: int
    makespan: float
    busy_area: float
    util_area: float
    mem_area: float
    mem_total: float
    reconfig_creates: int
    reconfig_destroys: int
    avoided_pairs: int
    events: int
    wall_s: float
    passes: int = 0  # scheduling passes run
    passes_skipped: int = 0  # passes skipped: nothing changed since one that started nothing
    timeline: list[tuple[float, int, float, float]] = field(default_factory=list)
    knowledge: dict = field(default_factory=dict)  # prediction error, pairs observed
    actions: dict = field(default_factory=dict)  # grow preemptions, regroup moves
    rules: dict = field(default_factory=dict)  # the decision settings of the run (SuiteRules.settings)
