"""What to requeue, and with which priority: pure rules for the controller helper's monitor.

Contention (US 2025/0265126 A1, FIG. 4): jobs sharing one GPU are ordered by when they started
there. When a job that was already running (a *senior*) loses more than `threshold` of the
throughput it had before the newest job (the *newcomer*) started beside it, the newcomer is
preempted: requeued, put at the head of the queue, and the pair is recorded so the two are
never packed together again. One newcomer per GPU per round: if a senior still suffers
after that, the next round preempts the next-newest job (block 420 of FIG. 4).

A senior that reports its throughput is judged on it (preferred: it is the job's own
measure of progress). One that reports nothing is judged on the GPU's counters
(`packer.util_contention`): its utilisation before and after, with a drop that must both
exceed the threshold and stand out of the counters' noise.

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

from packer.contention import Sharer, check_contention
from packer.util_contention import CounterRule, utilisation_drop

#: The largest nice `scontrol update Nice=` takes either way (Slurm's NICE_OFFSET - 3).
MAX_NICE = 2147483645


@dataclass(frozen=True)
class Resident:
    """One job on one GPU: when it started there, its throughput samples (at, value) as it
    reported them, and its utilisation samples (at, percent) from the GPU's counters."""

    job_id: int
    started_at: float
    throughput: tuple[tuple[float, float], ...] = ()
    fingerprint: str | None = None
    utilisation: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class Hurt:
    job_id: int
    fingerprint: str | None
    loss: float  # fraction of throughput (or utilisation) lost, 0.25 = 25 %
    before: float
    after: float
    signal: str = "throughput"  # "throughput" (the job's reports) | "utilisation" (the GPU's counters)


@dataclass(frozen=True)
class ContentionVerdict:
    """Requeue `newcomer`: it slowed the jobs in `hurt` by more than the threshold."""

    newcomer: int
    newcomer_fingerprint: str | None
    hurt: tuple[Hurt, ...]
    threshold: float

    @property
    def reason(self) -> str:
        worst = max(self.hurt, key=lambda h: h.loss)
        if worst.signal == "utilisation":
            measured = (f"of its GPU utilisation ({worst.before:.0f}%->{worst.after:.0f}%, the GPU's "
                        f"counters: it reports no progress)")
        else:
            measured = f"of its throughput ({worst.before:.3g}->{worst.after:.3g}/s)"
        return (
            f"job {worst.job_id} lost {worst.loss:.0%} {measured} after job {self.newcomer} "
            f"started beside it (threshold {self.threshold:.0%})"
        )


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def throughput_loss(
    samples: Iterable[tuple[float, float]],
    since: float,
    *,
    settle_s: float = 2.0,
    min_before: int = 2,
    min_after: int = 2,
    window: int = 10,
) -> tuple[float, float, float] | None:
    """(loss, before, after): mean throughput in the `window` samples before `since` against
    the mean of the samples from `since + settle_s` on. None until both sides have enough
    samples, or when the job had no throughput before."""
    ordered = sorted((at, value) for at, value in samples if value is not None and math.isfinite(value) and value >= 0)
    before = [v for at, v in ordered if at < since][-window:]
    after = [v for at, v in ordered if at >= since + settle_s][-window:]
    if len(before) < min_before or len(after) < min_after:
        return None
    mean_before, mean_after = _mean(before), _mean(after)
    if not mean_before or mean_before <= 0:
        return None
    return max(0.0, 1.0 - mean_after / mean_before), mean_before, mean_after


def find_contention(
    residents: Sequence[Resident],
    threshold: float = 0.10,
    *,
    settle_s: float = 2.0,
    min_before: int = 2,
    min_after: int = 2,
    counters: CounterRule | None = None,
) -> ContentionVerdict | None:
    """The newcomer to preempt on one GPU, or None. `residents` are the jobs on that GPU.

    Measures each senior's throughput before and after the newest job started (sample
    windows, `throughput_loss`); a senior without reported throughput is measured on its
    utilisation (`counters`, whose drop must stand out of the noise; a drop inside it counts
    as none). The verdict is `packer.contention.check_contention`'s.
    """
    counters = counters or CounterRule(threshold=threshold, settle_s=settle_s)
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must be a fraction in (0, 1), got {threshold}")
    pack = measure_seniors(residents, settle_s=settle_s, min_before=min_before, min_after=min_after,
                           counters=counters)
    if pack is None:
        return None
    newcomer = pack.newcomer
    measured = {m.job_id: (m.loss, m.before, m.after, m.signal) for m in pack.seniors}
    sharers = []
    for r in residents:
        before = after = None
        if r.job_id in measured:
            _, before, after, _ = measured[r.job_id]
        sharers.append(Sharer(str(r.job_id), r.fingerprint or str(r.job_id), r.started_at, before, after))
    verdict = check_contention(sharers, threshold)
    if verdict.requeue is None or verdict.requeue != str(newcomer.job_id):
        return None
    by_id = {r.job_id: r for r in residents}
    hurt = tuple(
        Hurt(int(j), by_id[int(j)].fingerprint, *measured[int(j)]) for j in verdict.hurt if int(j) in measured
    )
    return ContentionVerdict(newcomer.job_id, newcomer.fingerprint, hurt, threshold)


@dataclass(frozen=True)
class SeniorMeasure:
    """A senior's throughput (or utilisation) before and after the newcomer joined its GPU."""

    job_id: int
    fingerprint: str | None
    loss: float
    before: float
    after: float
    signal: str  # "throughput" | "utilisation"

    @property
    def speed(self) -> float:
        """after / before: its speed beside the newcomer relative to before it came."""
        return self.after / self.before if self.before > 0 else 1.0


@dataclass(frozen=True)
class PackMeasure:
    """The newest job on one GPU and every senior measured since it joined (hurt or not)."""

    newcomer: Resident
    seniors: tuple[SeniorMeasure, ...]


def measure_seniors(
    residents: Sequence[Resident],
    *,
    settle_s: float = 2.0,
    min_before: int = 2,
    min_after: int = 2,
    counters: CounterRule | None = None,
) -> PackMeasure | None:
    """The seniors of one GPU measured before and after its newest job (the newcomer) started:
    what :func:`find_contention` judges, hurt or not (the live pair knowledge records each
    as the senior's speed beside the newcomer). None with fewer than two jobs; a senior
    without enough samples on either side yet is left out."""
    counters = counters or CounterRule(settle_s=settle_s)
    if len(residents) < 2:
        return None
    newcomer = max(residents, key=lambda r: (r.started_at, r.job_id))
    seniors = []
    for r in residents:
        if r is not newcomer and r.started_at < newcomer.started_at:
            m = _measure(r, newcomer.started_at, settle_s, min_before, min_after, counters)
            if m is not None:
                seniors.append(SeniorMeasure(r.job_id, r.fingerprint, *m))
    return PackMeasure(newcomer, tuple(seniors))


def _measure(r: Resident, since: float, settle_s: float, min_before: int, min_after: int,
             counters: CounterRule) -> tuple[float, float, float, str] | None:
    """(loss, before, after, signal) of one senior: its reported throughput when it has
    some on both sides, else its utilisation from the counters (a drop inside the noise
    is measured as no loss)."""
    m = throughput_loss(r.throughput, since, settle_s=settle_s, min_before=min_before, min_after=min_after)
    if m is not None:
        return (*m, "throughput")
    drop = utilisation_drop(r.utilisation, since, counters)
    if drop is None:
        return None
    if not drop.significant:
        return 0.0, drop.before, drop.before, "utilisation"
    return drop.loss, drop.before, drop.after, "utilisation"


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
