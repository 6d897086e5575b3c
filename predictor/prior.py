"""The workload's own history as a prior: its earlier runs' memory curves say how high this
run will go, and when.

Each earlier run is a curve of (step, bytes): the same unit of steps as this run (seconds
since the start for the live watch, iterations for a training loop), the same signal
(memory in use, or its peak, as this run's samples). They are aligned with this run

- by **step** (``align="step"``): the earlier run at this run's step, or
- by **progress** (``align="progress"``): the earlier run at the same fraction of its own
  duration, this run's duration being its horizon.

At this run's step ``t``, with the level ``L`` it holds (the lower of its last two samples:
one noisy sample is not a level), each earlier run ``r`` forecasts this run's peak by the
horizon as

    forecast_r = peak_r(from t to the horizon) + max(0, L - level_r(t))

the height the earlier run still reached, raised by how far this run is above it now
(``level_r(t)`` is the highest the earlier run had been by ``t``, one sampling interval
of this run and the earlier run's own sampling gap at ``t`` allowed for the alignment: memory
that wanders out of phase with its earlier run, or a load ramp a little ahead of it, is no
rise above it). A run that is
*below* its earlier runs is still forecast to reach their peak: that is what the workload did.
An earlier run known to have gone *past* a share (it ran out of memory there, or was
restarted for it: ``PriorRun.exceeded``) has a peak above that share, whatever its curve
shows.

The bounds are the earlier runs' extremes: ``lower`` = the least ``forecast_r`` (every earlier
run says at least this), ``upper`` = the greatest, the point forecast their median. The
forecaster warns when ``lower`` is above the capacity: every earlier run, aligned with this
one, went past this share. So a run whose earlier runs all grew past its share is warned at
its first sample, and a run that rises above its earlier runs is warned as soon as the rise
carries every one of them past the share; a run below what its history reached is never
warned by the history alone. Nor by its own trend while every earlier run, lifted by this
run's excess, stays under the share (``upper``): a warm-up or a filling cache that the
trend would extrapolate past the share is what the earlier runs have already seen level
off; a run that leaves them lifts ``upper`` with it. The point forecast is the trend's,
kept between the runs' median and their ``upper``. ``crossing``: the step by which every aligned earlier run has
crossed. With no earlier run there is no prior, and the forecaster is what it was.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from predictor.checks import positive_finite

__all__ = ["HistoryPrior", "PriorRun", "PriorView"]

ALIGNMENTS = ("step", "progress")


@dataclass(frozen=True)
class PriorRun:
    """One earlier run's curve: steps strictly increasing, bytes finite and not negative."""

    steps: tuple[float, ...]
    bytes: tuple[float, ...]
    name: str = ""
    exceeded: float | None = None  # a share it went past (ran out of memory in it): its peak is above

    def __post_init__(self) -> None:
        if not self.steps or len(self.steps) != len(self.bytes):
            raise ValueError(f"earlier run {self.name or '?'}: needs samples, as many steps as bytes")
        s = np.asarray(self.steps, dtype=float)
        b = np.asarray(self.bytes, dtype=float)
        if not (np.all(np.isfinite(s)) and np.all(np.isfinite(b))):
            raise ValueError(f"earlier run {self.name or '?'}: steps and bytes must be finite numbers")
        if np.any(b < 0):
            raise ValueError(f"earlier run {self.name or '?'}: memory cannot be negative")
        if np.any(np.diff(s) <= 0):
            raise ValueError(f"earlier run {self.name or '?'}: steps must strictly increase")
        if self.exceeded is not None:
            positive_finite(f"earlier run {self.name or '?'}: the share it exceeded", self.exceeded)

    @property
    def duration(self) -> float:
        return self.steps[-1] - self.steps[0]


@dataclass(frozen=True)
class PriorView:
    """What the earlier runs say at one step of this run."""

    lower: float  # every earlier run says the peak reaches at least this
    point: float  # their median
    upper: float  # the highest of them
    crossing: float | None  # step of this run by which every earlier run, aligned, crossed the capacity
    runs: int
    note: str


class HistoryPrior:
    """Earlier runs of the workload, aligned with the current run (see the module docstring)."""

    def __init__(self, runs: Sequence[PriorRun], align: str = "step"):
        if align not in ALIGNMENTS:
            raise ValueError(f"align must be one of {', '.join(ALIGNMENTS)}, got {align!r}")
        if align == "progress" and any(r.duration <= 0 for r in runs):
            raise ValueError("aligning by progress needs earlier runs with more than one sample")
        self.align = align
        self._runs = [(r, np.asarray(r.steps, dtype=float), np.asarray(r.bytes, dtype=float)) for r in runs]

    def __len__(self) -> int:
        return len(self._runs)

    def view(self, step: float, level: float, interval: float, capacity: float, horizon: float) -> PriorView | None:
        """The earlier runs' forecast at this run's ``step``, where it holds ``level`` bytes;
        ``interval`` its sampling interval (the alignment tolerance), ``horizon`` the step it
        runs to. None without earlier runs."""
        if not self._runs:
            return None
        forecasts, crossings = [], []
        for run, xs, ys in self._runs:
            # the earlier run's steps per step of this run, and where this run's steps start in it
            scale, origin = (run.duration / horizon, float(xs[0])) if self.align == "progress" else (1.0, 0.0)
            at, end = origin + step * scale, origin + horizon * scale
            here = _level_near(xs, ys, at, max(interval, 0.0) * scale)
            ahead = ys[(xs >= at) & (xs <= end)]
            peak = max(float(ahead.max()) if ahead.size else here, here)
            lift = max(0.0, level - here)
            hit = np.nonzero((xs >= at) & (xs <= end) & (ys + lift > capacity))[0]
            crossed = float(xs[hit[0]]) if hit.size else None
            if run.exceeded is not None:  # it went past that share, at its end if its curve does not show it
                peak = max(peak, math.nextafter(run.exceeded, math.inf))
                if crossed is None and run.exceeded + lift >= capacity and xs[-1] <= end:
                    crossed = float(xs[-1])
            forecasts.append(peak + lift)
            crossings.append(None if crossed is None else max(step, (crossed - origin) / scale))
        lower, upper = min(forecasts), max(forecasts)
        crossing = None if lower <= capacity or any(c is None for c in crossings) else max(crossings)
        note = (f"history: {len(forecasts)} earlier run(s), aligned by {self.align}, reach "
                f"{lower:.4g}..{upper:.4g} bytes")
        return PriorView(lower, statistics.median(forecasts), upper, crossing, len(forecasts), note)


def _level_near(xs: np.ndarray, ys: np.ndarray, at: float, tol: float) -> float:
    """The highest the earlier run had been by ``at`` (its samples up to ``at + tol``, the
    first of its samples at or after ``at``, and its interpolated value at ``at``): this run
    rises above it only by going higher than it had gone by then, so a wandering level out of
    phase with its earlier run is no rise. Between two of its samples the earlier run may
    have reached the later one's level at any time: a load it took within one of its
    sampling gaps (0 at 0.25 s, 6 GiB at 1.9 s) is no rise above it when this run shows the
    same load earlier in that gap (6 GiB at 0.8 s)."""
    value = float(np.interp(at, xs, ys))
    known = max(int(np.searchsorted(xs, at + tol, side="right")), int(np.searchsorted(xs, at, side="left")) + 1)
    seen = ys[:known]
    return max(value, float(seen.max())) if seen.size else value
