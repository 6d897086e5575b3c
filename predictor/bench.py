"""The benchmark over a folder of series: warning lead, early peak error, false alarms, cost.

Each ``NAME.csv`` in the folder may have a sidecar ``NAME.json`` with
``{"capacity_gib": C (or "capacity_bytes"), "horizon": N (optional; default the last
step), "description": "..."}``. Series without a capacity use the default given to
:func:`run_bench`, else they are skipped with a note.

Per series: the real crossing step ``N`` (first sample above the capacity), the warning
step, the lead ``N - warn_step``, whether the warning came by ``0.1*N`` (steps counted from
the first sample), a false alarm when a series that never crosses is warned about, and the
relative error of the peak forecast made from the samples in the first 10 % of the steps
against the series' real peak. Timings per ``Forecaster.update``: wall clock, and CPU time of
this process (which a busy shared machine does not inflate).
"""
from __future__ import annotations

import json
import logging
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from predictor.checks import checked_horizon, positive_finite
from predictor.decision import H100_80GB_PARTITIONS_GIB, gib_sizes
from predictor.forecast import Forecaster, ForecasterOptions
from predictor.prior import HistoryPrior
from predictor.series import Series, read_prior, read_series

log = logging.getLogger(__name__)

__all__ = ["SeriesResult", "BenchReport", "bench_series", "run_bench"]

GIB = 1 << 30


@dataclass
class SeriesResult:
    name: str
    samples: int
    capacity_bytes: int
    horizon: float
    peak_bytes: int
    crossing_step: float | None
    warn_step: float | None
    lead_steps: float | None
    warned_by_10pct: bool | None  # None for series that never cross
    warn_fraction: float | None  # (warn_step - first) / (crossing_step - first): 0.1 is the goal
    false_alarm: bool
    predicted_peak_at_10pct: int
    peak_error_at_10pct: float
    update_ms_mean: float
    update_ms_p99: float
    update_ms_max: float
    update_cpu_ms_p99: float  # CPU time of this process: immune to a busy machine's preemption
    prior_runs: int = 0  # earlier runs of the workload given as a prior


@dataclass
class BenchReport:
    series: list[SeriesResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        crossing = [r for r in self.series if r.crossing_step is not None]
        never = [r for r in self.series if r.crossing_step is None]
        errors = [r.peak_error_at_10pct for r in self.series]
        errors_growing = [r.peak_error_at_10pct for r in crossing]
        means = [r.update_ms_mean for r in self.series]
        worst = max((r.update_ms_max for r in self.series), default=0.0)
        p99 = max((r.update_ms_p99 for r in self.series), default=0.0)
        cpu99 = max((r.update_cpu_ms_p99 for r in self.series), default=0.0)
        mean_err = statistics.fmean(errors) if errors else None
        return {
            "series": len(self.series),
            "crossing": len(crossing),
            "warned_by_10pct": sum(1 for r in crossing if r.warned_by_10pct),
            "warned_before_crossing": sum(1 for r in crossing if r.warn_step is not None and r.warn_step < r.crossing_step),
            "missed": sum(1 for r in crossing if r.warn_step is None or r.warn_step >= r.crossing_step),
            "never_crossing": len(never),
            "false_alarms": sum(1 for r in never if r.false_alarm),
            "mean_peak_error_at_10pct": mean_err,
            "mean_peak_error_at_10pct_crossing": statistics.fmean(errors_growing) if errors_growing else None,
            "max_peak_error_at_10pct": max(errors) if errors else None,
            "update_ms_mean": statistics.fmean(means) if means else None,
            "update_ms_p99": p99,  # the worst series' 99th percentile
            "update_ms_max": worst,  # wall clock: includes scheduling noise of a busy machine
            "update_cpu_ms_p99": cpu99,
            "goals": {
                "warning_by_10pct_of_crossing": bool(crossing) and all(r.warned_by_10pct for r in crossing),
                "no_false_alarm": not any(r.false_alarm for r in never),
                "mean_peak_error_at_10pct_le_15pct": mean_err is not None and mean_err <= 0.15,
                "update_p99_lt_5ms": p99 < 5.0,
                "update_cpu_p99_lt_5ms": cpu99 < 5.0,
            },
        }

    def to_dict(self) -> dict:
        return {"summary": self.summary(), "series": [asdict(r) for r in self.series], "skipped": self.skipped}


def _int_if_integral(v):
    return int(v) if isinstance(v, float) and v.is_integer() else v


def bench_series(
    series: Series,
    capacity_bytes: float,
    horizon: float | None = None,
    partition_sizes: tuple[int, ...] | None = None,
    options: ForecasterOptions | None = None,
    prior: HistoryPrior | None = None,
) -> SeriesResult:
    steps, values = series.steps, series.bytes
    first, last = steps[0], steps[-1]
    capacity_bytes = positive_finite(f"{series.name}: capacity", capacity_bytes)
    try:
        horizon = checked_horizon(horizon, first, last)
    except ValueError as exc:
        raise ValueError(f"{series.name}: {exc}") from None
    sizes = partition_sizes or gib_sizes(H100_80GB_PARTITIONS_GIB)
    crossing = next((s for s, b in zip(steps, values) if b > capacity_bytes), None)
    cut = first + 0.1 * (last - first)

    fc = Forecaster(capacity_bytes, horizon, partition_sizes=sizes, options=options, prior=prior)
    durations: list[float] = []
    cpu: list[float] = []
    at_10 = None
    for step, value, ratio in series.samples():
        t0, c0 = time.perf_counter(), time.process_time()
        forecast = fc.update(step, value, ratio)
        durations.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        if step <= cut:
            at_10 = forecast
    peak = max(b * r for b, r in zip(values, series.reuse_ratio)) if series.reuse_ratio else max(values)
    warn = fc.warn_step
    lead = None if crossing is None or warn is None else crossing - warn
    by_10 = None
    fraction = None
    if crossing is not None:
        by_10 = warn is not None and (warn - first) <= 0.1 * (crossing - first)
        if warn is not None and crossing > first:
            fraction = (warn - first) / (crossing - first)
    predicted = at_10.predicted_peak_bytes if at_10 is not None else int(values[0])
    return SeriesResult(
        name=series.name,
        samples=len(series),
        capacity_bytes=int(capacity_bytes),
        horizon=_int_if_integral(horizon),
        peak_bytes=int(peak),
        crossing_step=_int_if_integral(crossing),
        warn_step=_int_if_integral(warn),
        lead_steps=_int_if_integral(lead),
        warned_by_10pct=by_10,
        warn_fraction=fraction,
        false_alarm=crossing is None and warn is not None,
        predicted_peak_at_10pct=int(predicted),
        peak_error_at_10pct=abs(predicted - peak) / peak if peak else 0.0,
        update_ms_mean=1e3 * statistics.fmean(durations),
        update_ms_p99=1e3 * sorted(durations)[min(len(durations) - 1, int(0.99 * len(durations)))],
        update_ms_max=1e3 * max(durations),
        update_cpu_ms_p99=1e3 * sorted(cpu)[min(len(cpu) - 1, int(0.99 * len(cpu)))],
        prior_runs=len(prior) if prior is not None else 0,
    )


def _prior_of(root: Path, meta: dict, meta_path: Path) -> HistoryPrior | None:
    """The earlier runs a sidecar names (None when it names none)."""
    names = meta.get("prior") or []
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{meta_path}: \"prior\" must be a list of CSV paths relative to {root}")
    if not names:
        return None
    return HistoryPrior([read_prior(root / n) for n in names], meta.get("prior_align", "step"))


def run_bench(
    directory: str | Path,
    default_capacity_bytes: float | None = None,
    partition_sizes: tuple[int, ...] | None = None,
    options: ForecasterOptions | None = None,
    priors: bool = True,
) -> BenchReport:
    """Benchmark every ``*.csv`` in ``directory`` (sorted by name); with ``priors``, each
    series with the earlier runs its sidecar names (``"prior": [paths relative to the
    directory]``, ``"prior_align"``)."""
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a directory")
    report = BenchReport()
    for path in sorted(root.glob("*.csv")):
        meta_path = path.with_suffix(".json")
        meta = {}
        if meta_path.exists():
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{meta_path}: not valid JSON ({exc})") from None
        if "capacity_bytes" in meta:
            capacity = positive_finite(f"{meta_path}: capacity_bytes", meta["capacity_bytes"])
        elif "capacity_gib" in meta:
            capacity = positive_finite(f"{meta_path}: capacity_gib", meta["capacity_gib"]) * GIB
        elif default_capacity_bytes is not None:
            capacity = float(default_capacity_bytes)
        else:
            report.skipped.append(f"{path.name}: no capacity (add {meta_path.name} or pass a default)")
            continue
        series = read_series(path)
        series = Series(series.steps, series.bytes, series.reuse_ratio, path.name)
        prior = _prior_of(root, meta, meta_path) if priors else None
        result = bench_series(series, capacity, meta.get("horizon"), partition_sizes, options, prior)
        log.info("bench %s: %s", path.name, result)
        report.series.append(result)
    if not report.series and not report.skipped:
        raise FileNotFoundError(f"{root}: no *.csv series in this directory")
    return report
