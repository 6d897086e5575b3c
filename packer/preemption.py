"""What to requeue, and with which priority: pure rules for the controller helper's monitor.

Who is requeued for contention is ``packer.contention``'s rule.

Memory growth (`predictor`): when the forecaster is certain a job will outgrow
its share, it is restarted early on the next larger size (`restart_size`).

Head of the queue (`head_nice`): Slurm 22.05 resets a requeued job's submit time (and with
it its age factor, and under priority/basic its place in the order), and `scontrol top` only
reorders one user's own jobs, so the job is lifted above every pending job by an
administrator nice (Slurm subtracts a job's nice from the priority it computes). It is never
given a fixed priority: `scontrol update Priority=N` sets a priority Slurm never computes
again, for good, on every release (22.05 to 26.05: only a release of a held job or
`Priority=INFINITE`, which scontrol cannot send, end it), and it would override fair-share
even after a later requeue. The nice ends when the job starts (the keep-at-head watch puts
the job's own nice back), so its priority is Slurm's own again. This is kept on every
release: even where a requeued job kept its submit time, pending jobs older than it would
still come first, and the seed puts it at the head.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: The largest nice `scontrol update Nice=` takes either way (Slurm's NICE_OFFSET - 3).
MAX_NICE = 2147483645


@dataclass(frozen=True)
class Lift:
    """A requeued job kept at the head: its owner's nice (put back when it starts), the nice
    it has now, and its restart count when it was lifted (None: Slurm did not say). Kept in
    the store (`store.lifts`), so a helper that restarts still ends it."""

    own_nice: int
    nice: int
    restart_cnt: int | None = None


#: What a lift needs in a round (`lift_turn`)
KEEP, END, WAIT, FORGET = "keep", "end", "wait", "forget"
STARTED_STATES = frozenset({"RUNNING", "SUSPENDED", "CONFIGURING"})


def lift_turn(lifted: Lift, state: str | None, restart_cnt: int | None, priority: int | None) -> str:
    """What the lift of a job in `state` (None: it finished, or Slurm no longer lists it) needs now.

    FORGET: the job is gone or finished (Slurm changes it no more). END: it started, so its
    owner's nice goes back; so too when its restart count moved on since the lift (it started
    and was requeued again while no helper watched: a later requeue by Slurm itself keeps no
    lift). WAIT: its old run is still being cleaned up (COMPLETING) or it is held (priority
    0: its owner or an administrator releases it). KEEP: pending, kept above the others."""
    if state is None:
        return FORGET
    if state in STARTED_STATES:
        return END
    if lifted.restart_cnt is not None and restart_cnt is not None and restart_cnt != lifted.restart_cnt:
        return END
    if state != "PENDING" or not priority:
        return WAIT
    return KEEP


def head_nice(priority: int, nice: int, pending_priorities: Iterable[int | None]) -> int | None:
    """The nice that lifts a job of `priority` (at `nice` now) above every pending job, one
    above the highest; None when it is there already (or nothing else is pending).

    Slurm subtracts the nice from the priority it computes, so lowering the nice by the gap
    raises the priority by as much. Held jobs (priority 0) do not count. Bounded by Slurm's
    range (`MAX_NICE`): a gap wider than that is closed as far as Slurm allows."""
    others = [p for p in pending_priorities if p is not None and p > 0]
    if not others:
        return None
    gap = max(others) + 1 - priority
    if gap <= 0:
        return None
    return max(-MAX_NICE, nice - gap)


@dataclass(frozen=True)
class RestartSize:
    """What to restart a job with: `shards` shares of a GPU, or the whole GPU (`shards` None)."""

    shards: int | None
    reason: str

    @property
    def whole_gpu(self) -> bool:
        return self.shards is None


def restart_size(
    current_shards: int,
    need_bytes: float,
    share_bytes: float,
    max_packed_shards: int,
    partition_shards: Sequence[int] = (),
) -> RestartSize:
    """The next larger size that holds `need_bytes`: at least one share more than now,
    rounded up to a partition size when `partition_shards` (MIG profiles in shares) are
    given, and the whole GPU when no packed size holds it."""
    if share_bytes <= 0:
        raise ValueError("share_bytes must be positive")
    want = max(current_shards + 1, math.ceil(need_bytes / share_bytes))
    if partition_shards:
        fitting = sorted(s for s in partition_shards if s >= want)
        want = fitting[0] if fitting else max_packed_shards + 1
    if want > max_packed_shards:
        return RestartSize(None, f"needs {need_bytes / 2**30:.1f}GiB: more than a packed job may hold, whole GPU")
    return RestartSize(want, f"needs {need_bytes / 2**30:.1f}GiB: shard:{current_shards} -> shard:{want}")
