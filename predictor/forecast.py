"""The online forecaster: one sample in, one forecast of the job's peak memory out.

The MIG thesis (section 3.3, Algorithm 1) fits ``m = a*t + b`` on *peak memory since start* and
bounds the peak by ``a*T + b + z*sigma``. This forecaster fits that line on the samples of
the job's *current regime*, found afresh at every update:

1. **Regime change** (prefill spike, warm-up, a level shift, a ramp that became a plateau,
   memory handed back to the OS). A least-squares line on the whole window is compared
   with a line before and another after a break ``b``, for every ``b`` in the first
   ``max_break_fraction`` of the window, by the Bayesian information criterion (the
   break's location counted as two parameters, a run of one or two samples before it as one
   parameter per sample; residual sums floored at the measurement resolution). The
   likelihood ratio is deflated by ``(1 - r1) / (1 + r1)``, ``r1`` the lag-1
   autocorrelation of the two lines' residuals: memory that wanders (a server's KV cache as
   requests come and go) and allocator staircases (flat runs between jumps) would otherwise
   show a "significant" break everywhere. The fit starts at the break; a second break is
   searched for after it (still within the first part of the window, so that the regime
   keeps the rest).
2. **Plateau.** The regime is then halved while its recent half's slope is significantly
   (one-sided ``confidence``) below ``decel_ratio`` times the older half's: a flattening
   series is forecast from its flat recent part, whose lower bound claims no growth.

Allocator staircases (a caching allocator rounding tensors up to blocks) need nothing more:
the line through a staircase has the slope of the growth, the steps' quantisation enters the
residual spread (wider, so more conservative, bounds), and the point forecast adds the
largest excursion above the line (half a step). Fitting only the steps' envelope (one point
per step) was considered and left out: early in a job it has two or three points, too few
degrees of freedom for a useful interval.

On that window, with ``x`` the step and ``y`` the memory:

- **point forecast** of the peak at the horizon: the line at the horizon plus the largest
  excursion of a sample above the line in the window (a staircase's half step, noise). When
  the slope is not supported by the samples (``t**2 * (1 - r1) / (1 + r1) < log n``: BIC of
  a line against a constant, ``r1`` as in 1), the regime is read as flat and the point
  forecast is its own peak: a slope of noise is not extrapolated;
- **bounds**: one-sided ``confidence`` (99 %) OLS prediction bounds with Student's t and
  the extrapolation term, in closed form on the hot path (:mod:`predictor.linfit`). The
  upper bound is also at least that of the line fitted on the running peak since the start
  of the regime (the thesis' signal; used for sizing). The lower bound, and so certainty,
  comes from the memory series itself: a running maximum's residuals are neither
  independent nor centred (the maximum of noise rises like log n), so its interval is no
  basis for a warning;
- **a minimum number of samples** (``min_samples``) before any forecast is *ready*;
- **a convergence rule**: *confident* once the forecast of the line at the horizon moved by
  at most ``converge_tol`` (relative) over the last ``converge_fraction`` of the samples
  and at least ``converge_updates`` updates;
- **bounded extrapolation**: certainty is only claimed up to ``max_extrapolation`` times
  the span of the fitted window (its first sample to the latest). This is an assumption,
  not a statistical result: nothing in the samples seen so far tells a linear ramp that
  goes on from one that levels off later (a continuous-batching server fills its KV cache
  linearly for a while before it holds steady; an exponential approach looks linear over a
  fifth of its time constant). Some limit on how far a trend is trusted is unavoidable; with
  the default 10, a warning comes no earlier than a tenth of the way from the first sample
  of the fitted window to the crossing (the lower bound lies below the trend). So the
  benchmark's goal, a warning by 0.1 N, is met only where the window's own spread makes
  the bound tight early: at the last sample before 0.1 N of the modelled decode series
  the lower bound reaches the capacity at 10.8, 13.6 and 48 times the window's span (the
  last one, eight samples of an allocator staircase, has not converged by then either). A
  larger limit buys those warnings with false alarms on continuous-batching servers, whose
  fill often shows no significant bend for its first ten samples or so; the trade-off is
  measured by ``predictor/data/stress.py --max-extrapolation K``;
- **no extrapolation of a decelerating window**: when a quadratic fitted to the window bends
  down significantly (its quadratic term's t statistic, residual spread floored at the
  measurement resolution, deflated by ``sqrt((1 - r1) / (1 + r1))`` with ``r1`` the lag-1
  autocorrelation of its residuals as in the regime tests, below the one-sided
  ``confidence`` quantile of Student's t with ``n - 3`` degrees of freedom), the line is
  the wrong model beyond the samples and certainty is claimed at the latest sample only
  (``deceleration_test``). This catches a filling KV cache once its bend shows, which is
  often late: the regime rules above tend to cut a concave curve into short straight
  pieces first, and early on the bend is within the noise. It removes false alarms at
  any limit, but not enough of them to raise the limit on its strength;
- **a warning only when certain**: ``will_exceed`` = the lower bound (at the horizon, or at
  the reach above if nearer) is above the capacity, or the job already is; before the first
  warning, that bound is recomputed with statsmodels (``OLS.get_prediction(...)
  .summary_frame(alpha)["obs_ci_lower"]``, :func:`predictor.linfit.statsmodels_bounds`) on
  the same samples and the more conservative of the two decides. That deciding bound is
  the one reported (``lower_bytes``), so "will exceed" always agrees with the bounds shown;
  ``crossing_step`` is reported only when it lies within the horizon. ``warn`` = ``will_exceed``
  on a confident forecast; ``warn_step`` = the first such step. ``may_exceed`` (upper bound
  above capacity) is the thesis' criterion, kept for sizing.

With a reuse-ratio series (``update(step, requested, reuse_ratio=r)``), ``bytes`` are the
memory *requested* from the allocator; the inverse reuse ratio ``1/r`` is fitted the same
way, and physical memory is ``requested / inverse_ratio`` (bounds from the conservative
ends of both intervals, the inverse ratio never below 1).
"""
from __future__ import annotations

import importlib
import logging
import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from predictor.buffer import Buffer
from predictor.certainty import Verdict, judge
from predictor.checks import partition_sizes as checked_sizes
from predictor.checks import positive_finite
from predictor.linfit import t_quantile
from predictor.options import ForecasterOptions
from predictor.partitions import next_partition_for
from predictor.prior import HistoryPrior, PriorView
from predictor.trend import Estimate, fit_trend

log = logging.getLogger(__name__)

__all__ = ["Forecast", "Forecaster", "ForecasterOptions", "next_partition_for"]


@dataclass(frozen=True)
class Forecast:
    """What the forecaster says after one sample. Bytes are rounded to integers."""

    step: float  # step of the latest sample
    samples: int
    capacity_bytes: int
    horizon: float  # step the forecast is for (never before the latest sample)
    observed_peak_bytes: int
    predicted_peak_bytes: int  # point forecast of the peak at the horizon (>= observed peak)
    lower_bytes: int  # one-sided lower bound of the peak by the horizon, from the trend as far as it is trusted; will_exceed == (lower_bytes > capacity)
    upper_bytes: int  # one-sided upper bound at the horizon (>= predicted peak)
    ready: bool  # enough samples for a forecast
    confident: bool  # the forecast has converged
    will_exceed: bool  # certain (at the confidence level) to exceed the capacity by the horizon
    may_exceed: bool  # the upper bound exceeds the capacity (the thesis' criterion)
    warn: bool  # will_exceed on a confident forecast
    warn_step: float | None  # first step at which warn was true, sticky
    crossing_step: float | None  # where the fitted trend reaches the capacity, if it does by the horizon
    next_partition: int | None  # smallest partition size holding upper_bytes (None: none does)
    window: int  # samples in the fit
    slope_bytes_per_step: float
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


class Forecaster:
    """Online peak-memory forecaster for one job.

    ``capacity_bytes``: the memory the job has (its partition). ``horizon``: the step the
    job runs to (total iterations when known, else its time limit in the series' unit).
    ``partition_sizes``: sizes in bytes to choose ``next_partition`` from (optional).

    It keeps the samples and the sticky first warning; the fits are in
    :mod:`predictor.trend` (the regime in :mod:`predictor.regime`, how far ahead in
    :mod:`predictor.reach`) and the warning rules in :mod:`predictor.certainty`.
    """

    def __init__(
        self,
        capacity_bytes: float,
        horizon: float,
        *,
        partition_sizes: tuple[int, ...] | list[int] | None = None,
        options: ForecasterOptions | None = None,
        prior: HistoryPrior | None = None,
        **option_overrides,
    ):
        capacity_bytes = positive_finite("capacity_bytes", capacity_bytes)
        horizon = positive_finite("horizon", horizon)
        base = options or ForecasterOptions()
        self.options = ForecasterOptions(**{**asdict(base), **option_overrides}) if option_overrides else base
        self.capacity_bytes = float(capacity_bytes)
        self.horizon = float(horizon)
        self.partition_sizes = checked_sizes(partition_sizes)
        self.prior = prior if prior else None  # the workload's earlier runs (predictor.prior)
        self._steps = Buffer()
        self._raw = Buffer()  # the memory series as sampled
        self._inv = Buffer()  # inverse reuse ratio (reuse mode only)
        self._observed_peak = 0.0  # physical peak since start
        self._reuse_mode: bool | None = None
        self._points = Buffer()  # point forecast after each update (index = samples - 1)
        self._warn_step: float | None = None
        self.last: Forecast | None = None
        t_quantile(self.options.confidence, 10)  # import scipy now, not inside the first update
        if self.options.confirm_with_statsmodels:  # same: the first warning stays fast
            importlib.import_module("statsmodels.regression.linear_model")

    # ------------------------------------------------------------------ public
    def set_act_within(self, steps: float) -> None:
        """The caller's time to act, in steps (a live watch: its round and the requeue, in
        seconds): a warm-up is extrapolated at least this far, so that a load which does not
        stop is caught while there is still time to restart it."""
        self.options = replace(self.options, act_within=float(steps))

    @property
    def warn_step(self) -> float | None:
        return self._warn_step

    @property
    def samples(self) -> int:
        return self._steps.n

    def update(self, step: float, bytes_: float, reuse_ratio: float | None = None) -> Forecast:
        """Add one sample and return the forecast. Steps must strictly increase."""
        step = float(step)
        self._add_sample(step, float(bytes_), reuse_ratio)
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
    def _add_sample(self, step: float, value: float, reuse_ratio: float | None) -> None:
        """Check one sample and append it (the inverse reuse ratio too, in reuse mode)."""
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

        self._steps.append(step)
        self._raw.append(value)
        self._observed_peak = max(self._observed_peak, physical)

    def _forecast(self) -> Forecast:
        """The forecast from the samples so far: fit, bound, judge, explain."""
        opts = self.options
        n = self._steps.n
        step = float(self._steps.view()[-1])
        at = max(self.horizon, step)
        observed = self._observed_peak
        ready = n >= opts.min_samples
        est = raw = ifit = None
        if n >= 3:
            raw, ifit, est = self._estimate(at)
            # convergence is judged on the memory's own forecast: the running maximum of a
            # noisy series jumps, and its forecast with it, long after the trend has settled
            self._points.append(max(raw.point, observed))
        else:
            self._points.append(observed)
        predicted, upper = _clamped(est, observed)
        history = self._history(step, at)
        if history is not None:  # the earlier runs bound the estimate; the upper bound only rises
            predicted = max(min(predicted, history.upper), history.point, observed)
            upper = max(upper, history.upper, predicted)
        verdict = judge(
            observed=observed, predicted=predicted, upper=upper, capacity=self.capacity_bytes, ready=ready, est=est, raw=raw,
            ifit=ifit, points=self._points.view(), first_warning=self._warn_step is None, opts=opts,
            known_lower=history.lower if history is not None else -math.inf,
            known_upper=history.upper if history is not None else math.inf,
        )
        crossing = _within(est.crossing if est is not None else None, at)
        if history is not None and history.crossing is not None and verdict.will_exceed:
            crossing = history.crossing if crossing is None else min(crossing, history.crossing)
        notes = [est.note if est is not None else "", history.note if history is not None else ""]
        return Forecast(
            step=step,
            samples=n,
            capacity_bytes=int(self.capacity_bytes),
            horizon=at,
            observed_peak_bytes=int(round(observed)),
            predicted_peak_bytes=int(round(predicted)),
            lower_bytes=int(math.ceil(verdict.lower)),  # ceil: > an integral capacity exactly when will_exceed
            upper_bytes=int(math.ceil(upper)),
            ready=ready,
            confident=verdict.confident,
            will_exceed=verdict.will_exceed,
            may_exceed=verdict.may_exceed,
            warn=verdict.warn,
            warn_step=self._warn_step,
            crossing_step=crossing,
            next_partition=next_partition_for(upper, self.partition_sizes) if ready or history else None,
            window=est.window if est is not None else n,
            slope_bytes_per_step=est.slope if est is not None else 0.0,
            reason=self._reason(n, at, ready, predicted, verdict.lower, upper, verdict, "; ".join(filter(None, notes))),
        )

    def _history(self, step: float, at: float) -> PriorView | None:
        """What the earlier runs say now (None without them): this run holds the lower of its
        last two samples (one noisy sample is not a level), aligned within one sampling
        interval."""
        if self.prior is None:
            return None
        y, x = self._raw.view(), self._steps.view()
        level = float(np.min(y[-2:]))
        interval = float(x[-1] - x[-2]) if x.shape[0] >= 2 else 0.0
        return self.prior.view(step, level, interval, self.capacity_bytes, at)

    def _estimate(self, at: float) -> tuple[Estimate, Estimate | None, Estimate]:
        """(the memory's own fit, the inverse reuse ratio's or None, the combined estimate)
        at the horizon ``at``; at least three samples."""
        opts = self.options
        x = self._steps.view()
        y = self._raw.view()
        floor = opts.noise_floor_bytes
        first = float(x[0])
        capacity = self.capacity_bytes
        raw = fit_trend(x, y, at, floor, capacity, opts, first)  # what the job uses now
        # the thesis' signal, peak since start, taken from the start of the current regime
        k = raw.kept_from
        peak = raw
        if x.shape[0] - k >= 3:
            peak = fit_trend(
                x[k:], np.maximum.accumulate(y[k:]), at, floor, capacity, opts, first, breaks=False, point=False
            )
        ifit = None
        if self._reuse_mode:
            ifit = fit_trend(x, self._inv.view(), at, 0.0, capacity, opts, first)
            _to_physical([raw, peak], ifit)
        # Point forecast of the peak: the memory's line at the horizon plus the largest
        # excursion above it seen in the window (a staircase's half step, noise), or the
        # regime's own peak when it is flat. Upper bound: also the running-peak fit (the
        # thesis' signal). Certainty: the memory series alone; the running maximum of
        # noise rises (like log n) in clean steps and would raise false alarms.
        est = Estimate(
            point=raw.point + raw.excursion,
            lower=raw.lower,
            upper=max(peak.upper, raw.upper + raw.excursion),
            slope=raw.slope,
            window=raw.window,
            crossing=raw.crossing,
            note=raw.note,
            lower_reach=raw.lower_reach,
        )
        return raw, ifit, est

    def _reason(
        self, n: int, at: float, ready: bool, predicted: float, lower: float, upper: float, verdict: Verdict, note: str
    ) -> str:
        """The forecast in one sentence."""
        opts = self.options
        observed, capacity = self._observed_peak, self.capacity_bytes
        if observed > capacity:
            return f"observed peak {observed:.0f} already above capacity {capacity:.0f}"
        if not ready and not verdict.warn:
            return f"{n} of {opts.min_samples} samples needed before a forecast"
        reason = (
            f"peak at step {at:g}: {predicted:.0f} bytes, {opts.confidence:.0%} bounds "
            f"[{lower:.0f}, {upper:.0f}] vs capacity {capacity:.0f}; "
            + ("converged" if verdict.confident else "not converged yet")
        )
        if note:
            reason += f"; {note}"
        return reason


def _to_physical(estimates: list[Estimate], ifit: Estimate) -> None:
    """Reuse mode: the requested memory's estimates divided by the inverse reuse ratio
    (bounds from the conservative ends of both intervals, the ratio never below 1)."""
    ipoint, ilo, ihi = max(ifit.point, 1.0), max(ifit.lower, 1.0), max(ifit.upper, 1.0)
    for e in {id(e): e for e in estimates}.values():
        e.point, e.lower, e.upper, e.crossing = e.point / ipoint, e.lower / ihi, e.upper / ilo, None
        e.lower_reach = e.lower_reach / ihi  # conservative: inverse ratio at the horizon
        e.excursion = e.excursion / ipoint


def _within(crossing: float | None, at: float) -> float | None:
    """The step where the trend reaches the capacity, only when it lies within the forecast
    (not after the horizon ``at``): a nearly flat line meets any capacity at some absurd
    step that is no forecast at all."""
    if crossing is None or not math.isfinite(crossing) or crossing > at:
        return None
    return crossing


def _clamped(est: Estimate | None, observed: float) -> tuple[float, float]:
    """(predicted, upper) at the horizon, neither below the observed peak (the observed
    peak for both before the first fit). The lower bound is the verdict's."""
    if est is None:
        return observed, observed
    predicted = max(est.point, observed)
    return predicted, max(est.upper, predicted)
