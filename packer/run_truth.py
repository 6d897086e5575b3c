"""Which finished runs tell the truth about a workload's memory: the rule, as a pure function.

A run is a **measurement** only when it completed (Slurm: COMPLETED), it is the job's
latest run (an earlier run of a requeued job was cut short), and its samples cover it
without a gap. Every other run that measured some memory is a **lower bound**: the
workload needed at least that much, maybe more (it failed, was cancelled, timed out,
ran out of memory, was requeued by Slurm or by one of the suite's own actions, or its
node agent was down for part of it). The packer never takes a lower bound for the
workload's size (a workload needing 15 GiB whose failed run reached 5 GiB must not be
packed into 5 GiB); it only keeps a later run from getting less than the bound.
"""
from __future__ import annotations

from dataclasses import dataclass

#: Seconds without samples that a run may have and still be a measurement (the agent's
#: sampling jitter; a gap longer than this is a stretch nobody saw).
GAP_TOLERANCE_S = 10.0

MEASURED = "measured"
LOWER_BOUND = "lower-bound"


@dataclass(frozen=True)
class RunEnd:
    """How one run ended, as the controller knows it."""

    state: str  # Slurm's base state at the run's end (COMPLETED, FAILED, PENDING: requeued, ...)
    gaps_s: float | None = 0.0  # seconds without samples (None: unknown, no source covers the run)
    latest_run: bool = True  # False: an earlier run of a job that was requeued since
    ended_by: str = ""  # the suite's own action that ended it ("restart-memory", ...), if any


@dataclass(frozen=True)
class Verdict:
    kind: str  # MEASURED | LOWER_BOUND
    why: str  # one phrase: "completed", "cancelled", "requeued by restart-memory", "gaps 42s"

    @property
    def lower_bound(self) -> bool:
        return self.kind == LOWER_BOUND


def judge(end: RunEnd) -> Verdict:
    """Measurement or lower bound, and why (the first reason that applies)."""
    state = (end.state or "").upper()
    if end.ended_by:
        return Verdict(LOWER_BOUND, f"requeued by {end.ended_by}")
    if not end.latest_run:
        return Verdict(LOWER_BOUND, "requeued (a later run started)")
    if state != "COMPLETED":
        word = {"PENDING": "requeued", "REQUEUED": "requeued", "REQUEUE_HOLD": "requeued",
                "REQUEUE_FED": "requeued", "OUT_OF_MEMORY": "out of memory", "GONE": "ended unseen"}
        return Verdict(LOWER_BOUND, word.get(state, state.lower().replace("_", " ") or "ended unseen"))
    if end.gaps_s is None:
        return Verdict(LOWER_BOUND, "samples do not cover the run")
    if end.gaps_s > GAP_TOLERANCE_S:
        return Verdict(LOWER_BOUND, f"gaps {end.gaps_s:.0f}s without samples")
    return Verdict(MEASURED, "completed")


def sample_gaps(times: list[float], end_at: float | None, tolerance_s: float = GAP_TOLERANCE_S) -> float:
    """Seconds without samples in a run sampled at `times` (sorted) that ended at `end_at`
    (None: not known): each stretch longer than `tolerance_s` between two samples, or after
    the last one, counts whole."""
    if not times:
        return float("inf")
    edges = list(times) + ([end_at] if end_at is not None and end_at > times[-1] else [])
    return sum(b - a for a, b in zip(edges, edges[1:]) if b - a > tolerance_s)
