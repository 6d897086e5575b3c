"""Whether to restart a job now, priced in work: a pure function.

A restart throws away the work done since the job's last checkpoint (or its start), now.
An out-of-memory kill throws away the work done since that checkpoint *at the crossing*:
the elapsed work plus the time until the predicted crossing. Restarting is worth it when
the OOM is certain (the forecaster's ``warn``) and the crossing comes before the job ends;
the reason says what each choice would lose, so an admin can check the arithmetic.
Waiting is cheaper while the crossing lies beyond the job's end (no OOM to avoid), and a
restart is pointless when it cannot land before the crossing (``restart_cost_s`` longer
than the time left: the OOM happens during the restart anyway, so no work is saved).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RestartDecision", "decide_restart"]

GIB = 1 << 30


@dataclass(frozen=True)
class RestartDecision:
    restart: bool
    lose_now_s: float  # work a restart throws away now
    lose_at_oom_s: float | None  # work an OOM would throw away at the crossing (None: no crossing)
    reason: str


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def decide_restart(
    *,
    warn: bool,
    now_s: float,
    checkpoint_s: float,
    crossing_s: float | None,
    end_s: float | None,
    predicted_peak_bytes: float,
    capacity_bytes: float,
    restart_cost_s: float = 0.0,
) -> RestartDecision:
    """Weigh a restart now against an OOM later.

    Times in seconds on one clock: ``now_s``, the last checkpoint (or the job's start)
    ``checkpoint_s``, the predicted crossing ``crossing_s`` (None: the trend never reaches
    the capacity) and the job's end ``end_s`` (its time limit; None: unknown).
    ``restart_cost_s``: time to get the job running again (requeue, load).
    """
    if now_s < checkpoint_s:
        raise ValueError(f"now ({now_s}) is before the checkpoint ({checkpoint_s})")
    lose_now = now_s - checkpoint_s
    peak = f"{predicted_peak_bytes / GIB:.1f}/{capacity_bytes / GIB:.0f} GiB"
    if crossing_s is None:
        return RestartDecision(False, lose_now, None, f"keep: no crossing predicted (peak {peak})")
    lose_oom = max(crossing_s, now_s) - checkpoint_s
    to_go = max(0.0, crossing_s - now_s)
    costs = f"restarting now loses {_minutes(lose_now)}, an OOM would lose {_minutes(lose_oom)}"
    if not warn:
        return RestartDecision(
            False, lose_now, lose_oom, f"keep: an OOM in ~{_minutes(to_go)} is not certain yet ({peak}); {costs}"
        )
    if end_s is not None and crossing_s >= end_s:
        return RestartDecision(
            False, lose_now, lose_oom,
            f"keep: the job ends before the predicted OOM ({_minutes(max(0.0, end_s - now_s))} left, OOM in ~{_minutes(to_go)})",
        )
    if restart_cost_s >= to_go:
        return RestartDecision(
            False, lose_now, lose_oom,
            f"keep: a restart ({_minutes(restart_cost_s)}) cannot land before the OOM in ~{_minutes(to_go)}; {costs}",
        )
    return RestartDecision(True, lose_now, lose_oom, f"restart: oom predicted in ~{_minutes(to_go)} at {peak}; {costs}")
