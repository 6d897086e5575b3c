"""Priorities and sizes for the jobs the controller helper's monitor requeues: pure rules.

Who is requeued for contention is ``packer.contention``'s rule.

Memory growth (the thesis, Algorithm 1): when the forecaster is certain a job will outgrow
its share, it is restarted early on the next larger size (`restart_size`).

Head of the queue (`head_priority`): Slurm 22.05 resets a requeued job's submit time (and
with it its age factor, and under priority/basic its place in the order), so the job is
given an administrator priority above every pending job; `scontrol top` only reorders one
user's own jobs and is not enough. This is kept on every release, not only 22.05: even
where a requeued job kept its submit time, pending jobs older than it would still come
first, and the seed puts it at the head.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: The highest priority `scontrol update priority=` takes (Slurm keeps 0xfffffffe/f for NO_VAL/INFINITE).
MAX_PRIORITY = 0xFFFFFFFD
#: Priority of a requeued job when nothing else is pending (above Slurm's priority/basic base).
DEFAULT_HEAD_PRIORITY = 0xFFFF0000


def head_priority(pending_priorities: Iterable[int | None], exclude_current: int | None = None) -> int:
    """A priority above every pending job's, so the job is the next to start.

    `exclude_current` is the job's own present priority (left out of the maximum so that a
    job already at the head does not climb on every round).
    """
    others = [p for p in pending_priorities if p is not None and p != exclude_current and 0 < p <= MAX_PRIORITY]
    top = max(others, default=DEFAULT_HEAD_PRIORITY - 1)
    if exclude_current is not None and exclude_current > top:
        return exclude_current
    return min(MAX_PRIORITY, max(top + 1, DEFAULT_HEAD_PRIORITY))


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
