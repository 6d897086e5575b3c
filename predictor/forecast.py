"""The online forecaster: one sample in, one forecast of the job's peak memory out.

The thesis (section 3.3, Algorithm 1) fits ``m = a*t + b`` on *peak memory since start* and
bounds the peak by ``a*T + b + z*sigma``. This forecaster fits that line on the running
peak **and** on the raw series, and adds:

- **a proper prediction interval**: one-sided 99 % OLS bounds with Student's t and the
  extrapolation term (:mod:`predictor.linfit`, checked against statsmodels' ``obs_ci_*``);
- **a recent window**: halved while the recent half's slope is below ``decel_ratio`` times
  the older half's (warm-up that flattens, a plateau), or while the recent half rises
  significantly faster (model loading or a prefill spike at the start, acceleration);
- **two signals**: point forecast and upper bound are the larger of the running-peak fit
  and the raw fit. Certainty comes from the raw fit, or from the running-peak fit when the
  raw trend agrees: the running maximum of pure noise keeps rising (like log n) and alone
  would raise alarms on flat jobs, and a raw series hides no growth behind an early spike;
- **a minimum number of samples** (``min_samples``) before any forecast is *ready*;
- **a convergence rule**: *confident* once the raw trend's forecast at the horizon moved by
  at most ``converge_tol`` (relative) over the last ``converge_fraction`` of the samples and
  at least ``converge_updates`` updates;
- **bounded extrapolation**: certainty is only claimed up to ``max_extrapolation`` times
  the span observed so far (a ramp that later flattens looks linear at first);
- **a warning only when certain**: ``will_exceed`` = the lower bound (at the horizon, or
  the reach above if nearer) is above the capacity, or the job already is; ``warn`` =
  ``will_exceed`` on a confident forecast; ``warn_step`` = the first such step.
  ``may_exceed`` (upper bound above capacity) is the thesis' criterion, kept for sizing.

With a reuse-ratio series (``update(step, requested, reuse_ratio=r)``), ``bytes`` are the
memory *requested* from the allocator; the inverse reuse ratio ``1/r`` is fitted the same
way, and physical memory is ``requested / inverse_ratio`` (bounds from the conservative
ends of both intervals, the inverse ratio never below 1).
"""
from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from predictor.linfit import fit_line, t_quantile

log = logging.getLogger(__name__)

__all__ = ["Forecast", "Forecaster", "ForecasterOptions", "next_partition_for"]


@dataclass(frozen=True)
class ForecasterOptions:
    """Tuning knobs, with the defaults the benchmark was measured with."""

    confidence: float = 0.99  # one-sided, for both bounds
    min_samples: int = 6  # no decision before this many samples
    min_half: int = 4  # the deceleration test needs halves of at least this many samples
    max_window: int = 4096  # samples in the longest fit (bounds the cost of one update)
    max_extrapolation: float = 10.0  # certainty only within this many times the observed span
    decel_ratio: float = 0.5  # recent slope below this share of the older slope: drop the older half
    converge_tol: float = 0.05  # relative movement of the point forecast that still counts as stable
    converge_fraction: float = 0.25  # ... over this share of the samples seen so far
    converge_updates: int = 3  # ... and at least this many updates
    noise_floor_bytes: float = 0.0  # lower limit on the residual spread (measurement resolution)

    def __post_init__(self) -> None:
        if not 0.5 < self.confidence < 1.0:
            raise ValueError(f"confidence must be in (0.5, 1), got {self.confidence}")
        if self.min_samples < 3:
            raise ValueError(f"min_samples must be at least 3, got {self.min_samples}")
        if self.min_half < 3:
            raise ValueError(f"min_half must be at least 3, got {self.min_half}")
        if self.max_window < self.min_samples:
            raise ValueError("max_window must be at least min_samples")
        if not 0.0 < self.decel_ratio <= 1.0:
            raise ValueError(f"decel_ratio must be in (0, 1], got {self.decel_ratio}")
        if self.converge_tol < 0 or not 0.0 <= self.converge_fraction < 1.0 or self.converge_updates < 1:
            raise ValueError("converge_tol >= 0, 0 <= converge_fraction < 1, converge_updates >= 1")


@dataclass(frozen=True)
class Forecast:
    """What the forecaster says after one sample. Bytes are rounded to integers."""

    step: float  # step of the latest sample
    samples: int
    capacity_bytes: int
    horizon: float  # step the forecast is for (never before the latest sample)
    observed_peak_bytes: int
    predicted_peak_bytes: int  # point forecast of the peak at the horizon (>= observed peak)
    lower_bytes: int  # one-sided lower bound at the horizon (>= observed peak)
    upper_bytes: int  # one-sided upper bound at the horizon (>= predicted peak)
    ready: bool  # enough samples for a forecast
    confident: bool  # the forecast has converged
    will_exceed: bool  # certain (at the confidence level) to exceed the capacity by the horizon
    may_exceed: bool  # the upper bound exceeds the capacity (the thesis' criterion)
    warn: bool  # will_exceed on a confident forecast
    warn_step: float | None  # first step at which warn was true, sticky
    crossing_step: float | None  # where the fitted trend reaches the capacity, if it rises
    next_partition: int | None  # smallest partition size holding upper_bytes (None: none does)
    window: int  # samples in the fit
    slope_bytes_per_step: float
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


class _Buffer:
    """A growable float64 array (amortised O(1) append, zero-copy view)."""

    def __init__(self, capacity: int = 256):
        self._data = np.empty(capacity, dtype=np.float64)
        self.n = 0

    def append(self, value: float) -> None:
        if self.n == self._data.shape[0]:
            grown = np.empty(self._data.shape[0] * 2, dtype=np.float64)
            grown[: self.n] = self._data[: self.n]
            self._data = grown
        self._data[self.n] = value
        self.n += 1

    def view(self) -> np.ndarray:
        return self._data[: self.n]


def next_partition_for(need_bytes: float, partition_sizes: tuple[int, ...] | None) -> int | None:
    """Smallest size in ``partition_sizes`` that holds ``need_bytes``; None when none does."""
    if not partition_sizes:
        return None
    for size in sorted(partition_sizes):
        if size >= need_bytes:
            return int(size)
    return None


@dataclass
class _Estimate:
    point: float
    lower: float
    upper: float
    slope: float
    window: int
    crossing: float | None
    note: str = ""
    lower_reach: float = -math.inf  # lower bound at the reach (see _forecast)


class Forecaster:
    """Online peak-memory forecaster for one job.

    ``capacity_bytes``: the memory the job has (its partition). ``horizon``: the step the
    job runs to (total iterations when known, else its time limit in the series' unit).
    ``partition_sizes``: sizes in bytes to choose ``next_partition`` from (optional).
    """

    def __init__(
        self,
        capacity_bytes: float,
        horizon: float,
        *,
        partition_sizes: tuple[int, ...] | list[int] | None = None,
        options: ForecasterOptions | None = None,
        **option_overrides,
    ):
        if capacity_bytes <= 0:
            raise ValueError(f"capacity_bytes must be positive, got {capacity_bytes}")
        if not math.isfinite(horizon):
            raise ValueError(f"horizon must be finite, got {horizon}")
        base = options or ForecasterOptions()
        self.options = ForecasterOptions(**{**asdict(base), **option_overrides}) if option_overrides else base
        self.capacity_bytes = float(capacity_bytes)
        self.horizon = float(horizon)
        self.partition_sizes = tuple(sorted(int(s) for s in partition_sizes)) if partition_sizes else None
        self._steps = _Buffer()
        self._peak = _Buffer()  # peak since start of the memory series
        self._raw = _Buffer()  # the memory series as sampled
        self._inv = _Buffer()  # inverse reuse ratio (reuse mode only)
        self._observed_peak = 0.0  # physical peak (== _peak in plain mode)
        self._reuse_mode: bool | None = None
        self._points: list[float] = []  # point forecast after each update (index = samples - 1)
        self._warn_step: float | None = None
        self.last: Forecast | None = None
        t_quantile(self.options.confidence, 10)  # import scipy now, not inside the first update

    # ------------------------------------------------------------------ public
    @property
    def warn_step(self) -> float | None:
        return self._warn_step

    @property
    def samples(self) -> int:
        return self._steps.n

    def update(self, step: float, bytes_: float, reuse_ratio: float | None = None) -> Forecast:
        """Add one sample and return the forecast. Steps must strictly increase."""
        step = float(step)
        value = float(bytes_)
        if not math.isfinite(step) or not math.isfinite(value):
            raise ValueError(f"step and bytes must be finite numbers, got step={step!r} bytes={value!r}")
        if value < 0:
            raise ValueError(f"memory cannot be negative: {value!r} at step {step!r}")
        if self._steps.n and step <= self._steps.view()[-1]:
            raise ValueError(f"steps must strictly increase: {step!r} after {self._steps.view()[-1]!r}")
        if self._reuse_mode is None:
            self._reuse_mode = reuse_ratio is not None
        elif self._reuse_mode != (reuse_ratio is not None):
            raise ValueError("give reuse_ratio with every sample or with none")
        physical = value
        if self._reuse_mode:
            if not (reuse_ratio is not None and 0.0 < reuse_ratio <= 1.0):
                raise ValueError(f"reuse_ratio must be in (0, 1], got {reuse_ratio!r} at step {step!r}")
            self._inv.append(1.0 / reuse_ratio)
            physical = value * reuse_ratio

        previous = self._peak.view()[-1] if self._peak.n else 0.0
        self._steps.append(step)
        self._peak.append(max(previous, value))
        self._raw.append(value)
        self._observed_peak = max(self._observed_peak, physical)

        forecast = self._forecast()
        self.last = forecast
        if forecast.warn and self._warn_step is None:
            self._warn_step = step
            log.info(
                "step %g: job will exceed %.0f bytes by step %g (lower bound %d, upper %d)",
                step, self.capacity_bytes, self.horizon, forecast.lower_bytes, forecast.upper_bytes,
            )
            forecast = replace(forecast, warn_step=step)
            self.last = forecast
        return forecast

    # ----------------------------------------------------------------- private
    def _select_window(self, x: np.ndarray, y: np.ndarray) -> tuple[int, str]:
        """Length of the recent window to fit: halved while the series changes regime."""
        opts = self.options
        n = x.shape[0]
        w = min(n, opts.max_window)
        note = ""
        while w >= 2 * opts.min_half:
            half = w // 2
            xs, ys = x[n - w :], y[n - w :]
            old = fit_line(xs[: w - half], ys[: w - half])
            recent = fit_line(xs[w - half :], ys[w - half :])
            if old.slope > 0 and recent.slope < opts.decel_ratio * old.slope:
                note = "decelerating"
            elif recent.slope > (tq := t_quantile(opts.confidence, half - 2)) * recent.slope_se and (
                old.slope <= 0
                or (
                    old.slope < opts.decel_ratio * recent.slope
                    and recent.slope - old.slope > tq * math.hypot(recent.slope_se, old.slope_se)
                )
            ):
                note = "growing faster than before"
            else:
                break
            w = half
            note = f"{note}: fit on the last {w} samples"
        return w, note

    def _fit(self, x: np.ndarray, y: np.ndarray, at: float, reach: float) -> _Estimate:
        w, note = self._select_window(x, y)
        fit = fit_line(x[-w:], y[-w:])
        floor = self.options.noise_floor_bytes
        lower, upper = fit.bounds(at, self.options.confidence, floor)
        lower_reach = fit.bounds(reach, self.options.confidence, floor)[0]
        crossing = (self.capacity_bytes - fit.intercept) / fit.slope if fit.slope > 0 else None
        return _Estimate(fit.predict(at), lower, upper, fit.slope, w, crossing, note, lower_reach)

    def _forecast(self) -> Forecast:
        opts = self.options
        n = self._steps.n
        x = self._steps.view()
        step = float(x[-1])
        at = max(self.horizon, step)
        observed = self._observed_peak
        ready = n >= opts.min_samples

        est: _Estimate | None = None
        if n >= 3:
            # certainty is only claimed this far ahead: a linear trend is not trusted beyond
            # max_extrapolation times the span observed (ramps that flatten look linear)
            reach = min(at, x[0] + opts.max_extrapolation * (step - x[0]))
            peak = self._fit(x, self._peak.view(), at, reach)  # the thesis' signal
            raw = self._fit(x, self._raw.view(), at, reach)  # what the job uses now
            if self._reuse_mode:
                ifit = self._fit(x, self._inv.view(), at, reach)
                ipoint, ilo, ihi = max(ifit.point, 1.0), max(ifit.lower, 1.0), max(ifit.upper, 1.0)
                for e in (peak, raw):
                    e.point, e.lower, e.upper, e.crossing = e.point / ipoint, e.lower / ihi, e.upper / ilo, None
                    e.lower_reach = e.lower_reach / ihi  # conservative: inverse ratio at the horizon
            # Point and upper bound: the larger of the two signals. Certainty: the raw series
            # alone, or the peak series when the raw trend agrees. A running maximum of noise
            # rises (like log n) and alone would raise false alarms on flat, noisy jobs; a
            # raw series hides nothing behind an early spike (prefill, warm-up).
            est = _Estimate(
                point=max(peak.point, raw.point),
                lower=max(raw.lower, peak.lower if raw.point > self.capacity_bytes else -math.inf),
                upper=max(peak.upper, raw.upper),
                slope=max(peak.slope, raw.slope),
                window=max(peak.window, raw.window),
                crossing=min((c for c in (peak.crossing, raw.crossing) if c is not None), default=None),
                note=peak.note or raw.note,
                lower_reach=max(
                    raw.lower_reach, peak.lower_reach if raw.point > self.capacity_bytes else -math.inf
                ),
            )
            # convergence is judged on the raw trend: the running maximum of a noisy series
            # jumps, and its forecast with it, long after the trend has settled
            self._points.append(max(raw.point, observed))
        else:
            self._points.append(observed)

        if est is None:
            predicted = lower = upper = observed
            slope, window, crossing, note = 0.0, n, None, ""
        else:
            predicted = max(est.point, observed)
            lower = max(est.lower, observed)
            upper = max(est.upper, predicted)
            slope, window, crossing, note = est.slope, est.window, est.crossing, est.note

        already = observed > self.capacity_bytes
        confident = already or (ready and self._converged())
        will_exceed = already or (ready and est is not None and est.lower_reach > self.capacity_bytes)
        may_exceed = already or (ready and upper > self.capacity_bytes)
        warn = will_exceed and confident
        if already:
            reason = f"observed peak {observed:.0f} already above capacity {self.capacity_bytes:.0f}"
        elif not ready:
            reason = f"{n} of {opts.min_samples} samples needed before a forecast"
        else:
            reason = (
                f"peak at step {at:g}: {predicted:.0f} bytes, {opts.confidence:.0%} bounds "
                f"[{lower:.0f}, {upper:.0f}] vs capacity {self.capacity_bytes:.0f}; "
                + ("converged" if confident else "not converged yet")
            )
            if note:
                reason += f"; {note}"
        return Forecast(
            step=step,
            samples=n,
            capacity_bytes=int(self.capacity_bytes),
            horizon=at,
            observed_peak_bytes=int(round(observed)),
            predicted_peak_bytes=int(round(predicted)),
            lower_bytes=int(round(lower)),
            upper_bytes=int(math.ceil(upper)),
            ready=ready,
            confident=confident,
            will_exceed=will_exceed,
            may_exceed=may_exceed,
            warn=warn,
            warn_step=self._warn_step,
            crossing_step=crossing,
            next_partition=next_partition_for(upper, self.partition_sizes) if ready else None,
            window=window,
            slope_bytes_per_step=slope,
            reason=reason,
        )

    def _converged(self) -> bool:
        opts = self.options
        n = len(self._points)
        span = max(opts.converge_updates, int(math.ceil(opts.converge_fraction * n)))
        if span > n:
            return False
        recent = self._points[n - span :]
        current = recent[-1]
        scale = max(abs(current), 1.0)
        return max(abs(p - current) for p in recent) <= opts.converge_tol * scale


