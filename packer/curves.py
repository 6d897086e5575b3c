"""A run's memory curve, kept after the run ends so an admin can see, after the fact, why a
job was packed, restarted or requeued as it was.

A curve is a list of points (seconds since the run started, memory in use, peak so far).
What is stored is bounded: `downsample` keeps at most `MAX_POINTS` of them by this rule:

- every point when there are no more than the limit;
- else the first and the last point, the first point where the peak reaches its highest
  value, and, of the points between the first and the last cut into `limit - 3` equal runs
  (by position), the one with the most memory in use in each run (the earliest on a tie).

Keeping each stretch's highest point rather than an average is deliberate: what an admin
asks of a memory curve is how close it came to its partition, and a spike that a mean
would smooth away is the answer. Pure: no I/O here.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

MAX_POINTS = 200


def mig_profile_of(isolation: str | None) -> str | None:
    """The MIG profile of a job's isolation (``mig:1g.10gb@6`` -> ``1g.10gb``); None off MIG."""
    if isolation and isolation.startswith("mig:"):
        return isolation[4:].split("@", 1)[0]
    return None


def partition_capacity(isolation: str | None, shards: int | None, share_bytes: float,
                       profile_mib: Callable[[str], int | None]) -> tuple[float | None, str]:
    """The memory of a job's partition and its label: its MIG slice's memory (``profile_mib``
    of the profile; None or 0: a profile not known, then its shares count), else its shards'
    worth of the GPU, else none (a whole GPU is not a partition)."""
    profile = mig_profile_of(isolation)
    if profile is not None:
        mib = profile_mib(profile)
        if mib:
            return mib * 1024**2, f"MIG {profile}"
    if shards:
        return shards * share_bytes, f"shard:{shards}"
    return None, ""


@dataclass(frozen=True)
class CurvePoint:
    t: float  # seconds since the run started
    mem_bytes: int
    peak_bytes: int  # the peak since the run started (at least mem_bytes)


@dataclass(frozen=True)
class RunCurve:
    """The memory curve of one run, stored at its end; keyed like the run in the history
    (job, fingerprint, start)."""

    job_id: int
    fingerprint: str
    started_at: float  # the run's key, as in the history's runs (the node agent's start)
    ended_at: float
    # the job's state when the helper saw the run end (COMPLETED, PENDING: requeued, ...), or
    # "REQUEUED by <action>" when the helper's own action ended it (restart-memory, ...)
    end_state: str
    node: str
    gpu_index: int
    isolation: str
    shards: int | None  # shares Slurm gave the run (None: whole GPUs)
    capacity_bytes: float | None  # the partition it ran in (None: a whole GPU)
    capacity_label: str  # "MIG 1g.10gb", "shard:2" or ""
    samples: int  # samples the helper held at the run's end, before downsampling
    points: tuple[CurvePoint, ...]

    @property
    def peak_bytes(self) -> int:
        return max((max(p.peak_bytes, p.mem_bytes) for p in self.points), default=0)

    @property
    def duration_s(self) -> float:
        return self.points[-1].t - self.points[0].t if self.points else 0.0

    @property
    def how_it_ended(self) -> str:
        """"completed", "requeued (PENDING)", "failed", ... from the state seen at its end."""
        if self.end_state.startswith("REQUEUED by "):  # an action of the helper requeued it
            return "requeued by " + self.end_state[len("REQUEUED by "):]
        state = self.end_state.upper()
        if state == "COMPLETED":
            return "completed"
        if state in ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"):
            return f"requeued ({state})"
        if state == "GONE":
            return "ended (Slurm no longer listed it)"
        return state.lower()

    def summary(self) -> str:
        """One line: points, peak, duration, how it ended."""
        return (f"{len(self.points)} points of {self.samples} samples, peak {self.peak_bytes / 1024**3:.2f} GiB "
                f"over {self.duration_s:.0f} s, {self.how_it_ended}")


def downsample(points: Sequence[CurvePoint], limit: int = MAX_POINTS) -> tuple[CurvePoint, ...]:
    """At most `limit` of `points` (oldest first), by the rule in this module's docstring."""
    if limit < 4:
        raise ValueError(f"a curve needs room for at least 4 points (first, last, peak, one more), not {limit}")
    n = len(points)
    if n <= limit:
        return tuple(points)
    keep = {0, n - 1}
    top = max(p.peak_bytes for p in points)
    keep.add(next(i for i, p in enumerate(points) if p.peak_bytes == top))
    inner, buckets = n - 2, limit - 3
    for b in range(buckets):
        lo = 1 + b * inner // buckets
        hi = 1 + (b + 1) * inner // buckets
        if lo < hi:
            keep.add(max(range(lo, hi), key=lambda i: (points[i].mem_bytes, -i)))
    return tuple(points[i] for i in sorted(keep))
