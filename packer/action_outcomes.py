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
- **grow by preemption**: right when the grown job then ran past the point it would have run
  out (its peak went over its old share, or it ended out of memory; shadow: the same run left
  alone; enforce: the next run, on the larger share) and every evicted job started again;
  wrong when that run completed within its old share (the growth and its evictions were
  not needed); unknown when it was cut short (cancelled, timed out) within its old share,
  or an evicted job ended without running again.
- **regroup**: right when the head job the plan was for started by the plan's expected time
  (enforce: the moves bought the start; shadow: it was still waiting then, so the moves
  would have); wrong when it started later than that (enforce) or by then without any move
  (shadow); unknown when the head ended without starting.
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


def judge_growth(old_share_bytes: float, peak_bytes: float, end_state: str | None,
                 evicted: Sequence[tuple[int, bool | None]]) -> Judgement | None:
    """Judge a grow-preempt decision from the grown run. `evicted`: (job, started again:
    True, ended without: False, still waiting: None) of each job it evicted. None while
    the run goes on within its old share, or an evicted job still waits to start again."""
    share = f"{old_share_bytes / GIB:.1f}GiB"
    if not ran_out(peak_bytes, old_share_bytes, end_state):
        if end_state is None:
            return None
        ended = f"ended {end_state} at {peak_bytes / GIB:.1f}GiB, within its old share of {share}"
        if end_state != "COMPLETED":  # cut short (cancelled, timed out, requeued): it never showed
            return Judgement(UNKNOWN, f"{ended}, before it showed whether it needed more")
        why = f" ({len(evicted)} job(s) evicted for nothing)" if evicted else ""
        return Judgement(WRONG, f"{ended}: the growth was not needed{why}")
    if any(restarted is None for _, restarted in evicted):
        return None
    grew = (f"reached {peak_bytes / GIB:.1f}GiB, past its old share of {share}" if peak_bytes > old_share_bytes
            else f"ended {end_state} at {peak_bytes / GIB:.1f}GiB of its old {share} share")
    lost = [job for job, restarted in evicted if restarted is False]
    if lost:
        return Judgement(UNKNOWN, f"{grew}, but evicted job(s) {', '.join(map(str, lost))} ended without running again")
    done = f"; evicted job(s) {', '.join(str(job) for job, _ in evicted)} started again" if evicted else ""
    return Judgement(RIGHT, grew + done)


def judge_head_start(decided_at: float, expected_at: float, slack_s: float, started_at: float | None,
                     head_ended: bool, now: float, shadow: bool) -> Judgement | None:
    """Judge a regroup decision from the start of the head job it was for. `expected_at`:
    the plan's start of the head with the moves; `slack_s`: how late still counts as on
    time. None until the head starts or the expected time (plus slack) has passed."""
    deadline = expected_at + slack_s
    plan = f"the plan expected it at +{expected_at - decided_at:.0f}s"
    if started_at is not None and started_at <= deadline:
        at = f"started at +{started_at - decided_at:.0f}s"
        if shadow:
            return Judgement(WRONG, f"{at} with no job moved ({plan}): regrouping was not needed")
        return Judgement(RIGHT, f"{at}, {plan}")
    if started_at is None and head_ended:
        return Judgement(UNKNOWN, "the head job ended without starting (cancelled?)")
    if started_at is None and now <= deadline:
        return None
    if shadow:
        return Judgement(RIGHT, f"still waiting past the plan's expected start ({plan}): the moves would have "
                                "started it earlier")
    late = (f"started at +{started_at - decided_at:.0f}s" if started_at is not None
            else f"not started at +{now - decided_at:.0f}s")
    return Judgement(WRONG, f"{late}, later than planned ({plan}): the moves did not buy the start")
