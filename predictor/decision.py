"""The decision on a whole series: will this job outgrow its partition, since when, and
which size would hold it. A pure function over :class:`predictor.forecast.Forecaster`."""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from predictor.checks import checked_horizon, positive_finite
from predictor.forecast import Forecast, Forecaster, ForecasterOptions
from predictor.prior import HistoryPrior
from predictor.series import Series

log = logging.getLogger(__name__)

__all__ = ["Decision", "decide", "replay", "H100_80GB_PARTITIONS_GIB", "gib_sizes"]

GIB = 1 << 30

# Memory of the MIG profiles of an H100 80GB (1g.10gb, 1g.20gb/2g.20gb, 3g.40gb/4g.40gb,
# 7g.80gb), nominal. Callers with the GPU's catalogue (mig/) should pass exact sizes.
H100_80GB_PARTITIONS_GIB: tuple[float, ...] = (10, 20, 40, 80)


def gib_sizes(sizes_gib: Iterable[float]) -> tuple[int, ...]:
    return tuple(sorted(int(round(s * GIB)) for s in sizes_gib))


@dataclass(frozen=True)
class Decision:
    capacity_bytes: int
    horizon: float
    samples: int
    warn_step: float | None  # first step where, from the samples up to it, exceeding was certain
    will_exceed: bool  # the last forecast is certain the job exceeds the capacity by the horizon
    confident: bool  # the last forecast has converged
    predicted_peak_bytes: int
    lower_bytes: int
    upper_bytes: int
    next_partition: int | None  # smallest partition holding upper_bytes
    crossing_step: float | None
    reason: str

    @property
    def exceed_text(self) -> str:
        """"yes" / "no" / "not certain (...)": what the printed estimate and bounds say about
        the capacity, in words that cannot contradict them."""
        if self.will_exceed:
            return "yes"
        if self.predicted_peak_bytes > self.capacity_bytes:
            return "not certain (the estimate is above the capacity, its lower bound is not)"
        if self.upper_bytes > self.capacity_bytes:
            return "not certain (only the upper bound is above the capacity)"
        return "no"

    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("warn_step", "crossing_step", "horizon"):
            v = d[key]
            if isinstance(v, float) and v.is_integer():
                d[key] = int(v)
        return d


def _as_samples(series) -> Iterable[tuple[float, float, float | None]]:
    if isinstance(series, Series):
        yield from series.samples()
        return
    for row in series:
        if len(row) == 2:
            yield row[0], row[1], None
        else:
            yield row[0], row[1], row[2]


def replay(series, forecaster: Forecaster) -> list[Forecast]:
    """Feed every sample of ``series`` to ``forecaster``; the forecasts, in order."""
    return [forecaster.update(step, value, ratio) for step, value, ratio in _as_samples(series)]


def decide(
    series: Series | Iterable[tuple[float, float]] | Iterable[tuple[float, float, float | None]],
    capacity_bytes: float,
    horizon: float | None = None,
    partition_sizes: Iterable[int] | None = None,
    options: ForecasterOptions | None = None,
    prior: HistoryPrior | None = None,
) -> Decision:
    """Replay ``series`` (``(step, bytes)`` or ``(step, bytes, reuse_ratio)`` rows, or a
    :class:`Series`) through a fresh forecaster and decide.

    ``horizon`` is the step the job runs to (total iterations when known, else its time
    limit); when None, the last step of the series. ``partition_sizes`` in bytes; default
    :data:`H100_80GB_PARTITIONS_GIB`. ``prior``: the workload's earlier runs
    (:mod:`predictor.prior`).
    """
    rows = list(_as_samples(series))
    if not rows:
        raise ValueError("an empty series has nothing to decide on")
    capacity_bytes = positive_finite("capacity", capacity_bytes)
    horizon = checked_horizon(horizon, rows[0][0], rows[-1][0])
    sizes = tuple(partition_sizes) if partition_sizes is not None else gib_sizes(H100_80GB_PARTITIONS_GIB)
    forecaster = Forecaster(capacity_bytes, horizon, partition_sizes=sizes, options=options, prior=prior)
    last = replay(rows, forecaster)[-1]
    decision = Decision(
        capacity_bytes=int(capacity_bytes),
        horizon=float(horizon),
        samples=last.samples,
        warn_step=forecaster.warn_step,
        will_exceed=last.will_exceed,
        confident=last.confident,
        predicted_peak_bytes=last.predicted_peak_bytes,
        lower_bytes=last.lower_bytes,
        upper_bytes=last.upper_bytes,
        next_partition=last.next_partition,
        crossing_step=last.crossing_step,
        reason=last.reason,
    )
    log.debug("decision: %s", decision)
    return decision
