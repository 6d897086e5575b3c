"""Whether to restart a job now, priced in work: a pure function.

A restart throws away the work done since the job's last checkpoint (or its start), now,
and costs the time to get the job going again (``restart_cost_s``: requeue, queue at the
head, reload). An out-of-memory kill throws away the work done since that checkpoint *at
the crossing* (the elapsed work plus the time until the predicted crossing), and the job
then fails: it costs at least the same restart again, and a user's resubmission.

The forecast is a bet, not a fact: ``p_oom`` is the probability that the OOM really comes
(the forecaster's one-sided confidence when it warns). The rule compares expected losses:

    restart now   lose_now + restart_cost
    keep going    p_oom * (lose_at_oom + restart_cost + oom_penalty)   (nothing if it never comes)

and restarts when keeping it is expected to lose more. So a far-off OOM on a young job
restarts at once, while a long-running job a few seconds from a crossing that is only
probable keeps its work. Keeping also wins when the crossing lies beyond the job's end
(its time limit: no OOM to avoid) and, of course, when the forecaster is not certain.
The reason states both prices, so an admin can check the arithmetic.
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
    expected_keep_s: float | None = None  # expected loss of keeping the job (p_oom-weighted)
    expected_restart_s: float | None = None  # loss of restarting now, its restart cost included


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
    p_oom: float = 0.99,
    oom_penalty_s: float = 0.0,
) -> RestartDecision:
    """Weigh a restart now against an OOM later.

    Times in seconds on one clock: ``now_s``, the last checkpoint (or the job's start)
    ``checkpoint_s``, the predicted crossing ``crossing_s`` (None: the trend never reaches
    the capacity) and the job's end ``end_s`` (its time limit; None: unknown).
    ``restart_cost_s``: time to get the job running again (requeue, load).
    ``p_oom``: probability that the predicted OOM comes, in (0, 1].
    ``oom_penalty_s``: what a failure costs beyond a restart (the job fails, and its user
    notices and resubmits it: the suite restarts only what it requeues itself).
    """
    if now_s < checkpoint_s:
        raise ValueError(f"now ({now_s}) is before the checkpoint ({checkpoint_s})")
    if not 0.0 < p_oom <= 1.0:
        raise ValueError(f"p_oom must be in (0, 1], got {p_oom}")
    if restart_cost_s < 0 or oom_penalty_s < 0:
        raise ValueError(f"restart_cost_s and oom_penalty_s must not be negative, got {restart_cost_s}, {oom_penalty_s}")
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
    keep = p_oom * (lose_oom + restart_cost_s + oom_penalty_s)
    restart = lose_now + restart_cost_s
    penalty = f" + failure {_minutes(oom_penalty_s)}" if oom_penalty_s else ""
    priced = (f"expected loss keeping it {_minutes(keep)} (p={p_oom:.2f}{penalty}), "
              f"restarting {_minutes(restart)} (restart {_minutes(restart_cost_s)})")
    if keep <= restart:
        return RestartDecision(
            False, lose_now, lose_oom,
            f"keep: an OOM in ~{_minutes(to_go)} costs less than a restart now; {costs}; {priced}", keep, restart,
        )
    return RestartDecision(
        True, lose_now, lose_oom, f"restart: oom predicted in ~{_minutes(to_go)} at {peak}; {costs}; {priced}",
        keep, restart,
    )
