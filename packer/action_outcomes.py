"""Was a run-time action right? Pure rules that judge a decision from what happened next.

- **memory restart**: right when the run it was about (shadow: the same run left alone;
  enforce: the next run, on the larger size) went over the share it had when the decision
  was taken, or ended out of memory (Slurm's OUT_OF_MEMORY, or FAILED within 5 % of the
  share: the simulated and real GPU refuse the allocation that would cross it); wrong when
  that run ended below the share.
- **contention requeue**: right when a hurt neighbour's throughput came back to within the
  threshold of its level before the newcomer, once the newcomer left its GPU (shadow: the
  newcomer ended; enforce: it was requeued); wrong when none came back (the newcomer was not
  the cause); unknown when the hurt jobs ended first.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

GIB = 1024**3
RIGHT, WRONG, UNKNOWN, MISSED = "right", "wrong", "unknown", "missed"
NEAR_FULL = 0.95  # a FAILED run this close to its share ran out of memory


@dataclass(frozen=True)
class Judgement:
    outcome: str  # right | wrong | unknown | missed
    detail: str


def ran_out(peak_bytes: float, capacity_bytes: float, end_state: str | None) -> bool:
    """Whether a run outgrew `capacity_bytes` (its peak went over, or it died of it)."""
    if peak_bytes > capacity_bytes or end_state == "OUT_OF_MEMORY":
        return True
    return end_state == "FAILED" and peak_bytes >= NEAR_FULL * capacity_bytes


def judge_memory_run(capacity_bytes: float, peak_bytes: float, end_state: str | None) -> Judgement | None:
    """Judge a memory restart from the run it was about; None while that run goes on below
    its share (`end_state` None: still running)."""
    share = f"{capacity_bytes / GIB:.1f}GiB"
    if peak_bytes > capacity_bytes:
        return Judgement(RIGHT, f"reached {peak_bytes / GIB:.1f}GiB, over its share of {share}")
    if end_state is None:
        return None
    if ran_out(peak_bytes, capacity_bytes, end_state):
        return Judgement(RIGHT, f"ended {end_state} at {peak_bytes / GIB:.1f}GiB of its {share} share")
    return Judgement(WRONG, f"ended {end_state} at {peak_bytes / GIB:.1f}GiB, below its share of {share}")


def recovered(before: float, after: Sequence[float], threshold: float) -> bool:
    """Throughput `after` is back within `threshold` of `before`."""
    return sum(after) / len(after) >= before * (1 - threshold)


def judge_recovery(hurt: Sequence[tuple[int, float, Sequence[float]]], threshold: float,
                   min_after: int) -> Judgement | None:
    """`hurt`: (job, throughput before the newcomer, throughput samples since it left) of
    each hurt job still running. None until each has `min_after` samples."""
    if not hurt:
        return Judgement(UNKNOWN, "the hurt jobs ended before the newcomer left")
    if any(len(after) < min_after for _, _, after in hurt):
        return None
    parts = [f"job {job} {sum(after) / len(after):.3g}/s (before {before:.3g}/s)" for job, before, after in hurt]
    if any(recovered(before, after, threshold) for _, before, after in hurt):
        return Judgement(RIGHT, "speed recovered once the newcomer left: " + ", ".join(parts))
    return Judgement(WRONG, "speed did not recover once the newcomer left: " + ", ".join(parts))
