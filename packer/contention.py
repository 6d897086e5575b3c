"""Contention after a pack: the one rule, live and in the replay.

Jobs sharing one GPU are ordered by when they started there. When a job that was already
running (a *senior*) loses more than ``threshold`` of the throughput it had before the
newest job (the *newcomer*) started beside it, the newcomer is the one to requeue (at the
head of the queue), and each pair (newcomer, hurt senior) is kept apart from now on. The
job that arrived last pays, never a senior one.

Two ways in, one verdict (:class:`ContentionVerdict`, from :func:`check_contention`):

- the replay knows each job's speed before and after (:class:`Sharer`) and calls
  :func:`check_contention` directly;
- the live watch has samples (:class:`Resident`): :func:`measure_seniors` measures each
  senior's reported throughput before and after (:func:`throughput_loss`), or, for a job
  that reports nothing, its utilisation from the GPU's counters (``packer.util_contention``,
  whose drop must also stand out of the noise); :func:`find_contention` hands those
  measurements to :func:`check_contention`.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from packer.corunner import pair_key
from packer.util_contention import CounterRule, utilisation_drop


@dataclass(frozen=True)
class Sharer:
    """A job on a shared GPU: its throughput before the newest job joined, and now."""

    job_id: int
    fingerprint: str | None  # its workload (None: unknown, never recorded as a pair)
    started_at: float
    baseline_throughput: float | None
    throughput: float | None
    signal: str = "throughput"  # "throughput" (the job's reports) | "utilisation" (the GPU's counters)


@dataclass(frozen=True)
class Hurt:
    job_id: int
    fingerprint: str | None
    loss: float  # fraction of throughput (or utilisation) lost, 0.25 = 25 %
    before: float
    after: float
    signal: str = "throughput"


@dataclass(frozen=True)
class ContentionVerdict:
    """Requeue `newcomer` at the head: it slowed the jobs in `hurt` by more than the threshold."""

    newcomer: int
    newcomer_fingerprint: str | None
    hurt: tuple[Hurt, ...]
    threshold: float

    @property
    def avoid_pairs(self) -> tuple[tuple[str, str], ...]:
        """The workload pairs to keep apart from now on (jobs without a workload name none)."""
        if not self.newcomer_fingerprint:
            return ()
        return tuple(sorted({pair_key(self.newcomer_fingerprint, h.fingerprint) for h in self.hurt
                             if h.fingerprint}))

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
            f"started beside it (threshold {self.threshold:.0%}): requeue {self.newcomer} at the head"
        )


def speed_loss(baseline: float | None, now: float | None) -> float | None:
    """The fraction of ``baseline`` lost (0.2 = 20 % slower); None when unknown."""
    if baseline is None or now is None or baseline <= 0:
        return None
    return max(0.0, 1.0 - now / baseline)


def check_contention(sharers: Sequence[Sharer], threshold: float = 0.10) -> ContentionVerdict | None:
    """The newcomer to requeue on one GPU, or None (alone, everyone within the threshold, or
    speeds unknown). Never raises."""
    if len(sharers) < 2:
        return None
    newcomer = max(sharers, key=lambda s: (s.started_at, s.job_id))
    hurt: list[Hurt] = []
    for s in sharers:
        loss = None if s is newcomer else speed_loss(s.baseline_throughput, s.throughput)
        if loss is not None and loss > threshold:
            hurt.append(Hurt(s.job_id, s.fingerprint, loss, s.baseline_throughput, s.throughput, s.signal))
    if not hurt:
        return None
    return ContentionVerdict(newcomer.job_id, newcomer.fingerprint, tuple(hurt), threshold)


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
    the mean of the samples from `since + settle_s` on (:func:`speed_loss` of the two). None
    until both sides have enough samples, or when the job had no throughput before."""
    ordered = sorted((at, value) for at, value in samples if value is not None and math.isfinite(value) and value >= 0)
    before = [v for at, v in ordered if at < since][-window:]
    after = [v for at, v in ordered if at >= since + settle_s][-window:]
    if len(before) < min_before or len(after) < min_after:
        return None
    mean_before, mean_after = _mean(before), _mean(after)
    loss = speed_loss(mean_before, mean_after)
    return None if loss is None else (loss, mean_before, mean_after)


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

    def sharers(self) -> list[Sharer]:
        """The newcomer and its measured seniors, as :func:`check_contention` reads them."""
        n = self.newcomer
        return [Sharer(n.job_id, n.fingerprint, n.started_at, None, None),
                *(Sharer(m.job_id, m.fingerprint, -math.inf, m.before, m.after, m.signal) for m in self.seniors)]


def find_contention(
    residents: Sequence[Resident],
    threshold: float = 0.10,
    *,
    settle_s: float = 2.0,
    min_before: int = 2,
    min_after: int = 2,
    counters: CounterRule | None = None,
) -> ContentionVerdict | None:
    """The newcomer to preempt on one GPU from its jobs' samples, or None: the seniors
    measured (:func:`measure_seniors`), judged by :func:`check_contention`."""
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must be a fraction in (0, 1), got {threshold}")
    counters = counters or CounterRule(threshold=threshold, settle_s=settle_s)
    pack = measure_seniors(residents, settle_s=settle_s, min_before=min_before, min_after=min_after,
                           counters=counters)
    return None if pack is None else check_contention(pack.sharers(), threshold)


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
