"""The online forecaster: one sample in, one forecast of the job's peak memory out.

The thesis (section 3.3, Algorithm 1) fits ``m = a*t + b`` on *peak memory since start* and
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
  the same samples and the more conservative of the two decides. ``warn`` = ``will_exceed``
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

from predictor.linfit import fit_line, statsmodels_bounds, t_quantile

log = logging.getLogger(__name__)

__all__ = ["Forecast", "Forecaster", "ForecasterOptions", "next_partition_for"]


@dataclass(frozen=True)
class ForecasterOptions:
    """Tuning knobs, with the defaults the benchmark was measured with."""

    confidence: float = 0.99  # one-sided, for both bounds and for the regime tests
    min_samples: int = 6  # no decision before this many samples
    min_half: int = 4  # the plateau test needs halves of at least this many samples
    max_window: int = 4096  # samples in the longest fit (bounds the cost of one update)
    max_extrapolation: float = 20.0  # certainty only within this many times the fitted window's span (evidence_per_span limits it further)
    deceleration_test: bool = True  # no extrapolated certainty from a significantly concave window
    decel_ratio: float = 0.5  # recent slope below this share of the older slope (significantly): plateau
    converge_tol: float = 0.05  # relative movement of the point forecast that still counts as stable
    converge_fraction: float = 0.25  # ... over this share of the samples seen so far
    converge_updates: int = 3  # ... and at least this many updates
    noise_floor_bytes: float = 0.0  # lower limit on the residual spread (measurement resolution)
    regime_breaks: bool = True  # fit from the last significant break (BIC); see the module docstring
    max_break_fraction: float = 0.5  # ... found in this first share of the window (the rest is kept)
    confirm_with_statsmodels: bool = True  # a warning needs statsmodels' obs_ci_lower above capacity too
    warmup_rule: bool = True  # no extrapolation from a regime within which memory more than doubled (a load) ...
    warmup_reach_samples: float = 1.0  # ... beyond the next sample (the least time to act before an OOM)
    act_within: float = 0.0  # ... or beyond this many steps, if more: the caller's time to act (a live watch's round)
    history_rule: bool = True  # no extrapolation while the trend is below a level the job already held
    evidence_per_span: float = 2.0  # independent samples needed per span of extrapolation (0: off)
    autocorrelated_bounds: bool = True  # certainty bound widened for autocorrelated residuals (AR(1))

    def __post_init__(self) -> None:
        if not 0.5 < self.confidence < 1.0:
            raise ValueError(f"confidence must be in (0.5, 1), got {self.confidence}")
        if self.min_samples < 3:
            raise ValueError(f"min_samples must be at least 3, got {self.min_samples}")
        if self.min_half < 3:
            raise ValueError(f"min_half must be at least 3, got {self.min_half}")
        if self.max_window < self.min_samples:
            raise ValueError("max_window must be at least min_samples")
        if not self.warmup_reach_samples >= 0.0:
            raise ValueError(f"warmup_reach_samples must be at least 0, got {self.warmup_reach_samples}")
        if not (math.isfinite(self.act_within) and self.act_within >= 0.0):
            raise ValueError(f"act_within must be a finite number of steps >= 0, got {self.act_within}")
        if not self.max_extrapolation >= 1.0:
            raise ValueError(f"max_extrapolation must be at least 1, got {self.max_extrapolation}")
        if not 0.0 < self.decel_ratio <= 1.0:
            raise ValueError(f"decel_ratio must be in (0, 1], got {self.decel_ratio}")
        if self.converge_tol < 0 or not 0.0 <= self.converge_fraction < 1.0 or self.converge_updates < 1:
            raise ValueError("converge_tol >= 0, 0 <= converge_fraction < 1, converge_updates >= 1")
        if not 0.0 <= self.max_break_fraction < 1.0:
            raise ValueError(f"max_break_fraction must be in [0, 1), got {self.max_break_fraction}")


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


class _Sums:
    """Prefix sums of one window: the least-squares line of any run of it in O(1).

    Values are centred on the window's means first, so that the sums of squares of byte
    counts (1e10) keep their precision.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray):
        n = x.shape[0]
        self.x, self.y = x, y
        self.xm, self.ym = float(x.sum()) / n, float(y.sum()) / n
        xc = x - self.xm
        yc = y - self.ym
        sums = np.zeros((5, n + 1))
        np.cumsum(xc, out=sums[0, 1:])
        np.cumsum(yc, out=sums[1, 1:])
        np.cumsum(xc * xc, out=sums[2, 1:])
        np.cumsum(xc * yc, out=sums[3, 1:])
        np.cumsum(yc * yc, out=sums[4, 1:])
        self.cx, self.cy, self.cxx, self.cxy, self.cyy = sums

    def rss(self, i: np.ndarray | int, j: np.ndarray | int) -> np.ndarray:
        """Residual sums of squares of the lines through samples ``[i, j)`` (elementwise;
        runs of one or two samples fit exactly: 0)."""
        m = np.asarray(j - i, dtype=np.float64)
        sx, sy = self.cx[j] - self.cx[i], self.cy[j] - self.cy[i]
        sxx = self.cxx[j] - self.cxx[i] - sx * sx / m
        sxy = self.cxy[j] - self.cxy[i] - sx * sy / m
        rss = self.cyy[j] - self.cyy[i] - sy * sy / m
        with np.errstate(divide="ignore", invalid="ignore"):
            rss -= np.where(sxx > 0, sxy * sxy / sxx, 0.0)
        rss[m <= 2] = 0.0
        return np.maximum(rss, 0.0, out=rss)

    def rss_one(self, i: int, j: int) -> float:
        """:meth:`rss` of one run ``[i, j)``."""
        m = j - i
        if m <= 2:
            return 0.0
        sx, sy = float(self.cx[j] - self.cx[i]), float(self.cy[j] - self.cy[i])
        sxx = float(self.cxx[j] - self.cxx[i]) - sx * sx / m
        sxy = float(self.cxy[j] - self.cxy[i]) - sx * sy / m
        rss = float(self.cyy[j] - self.cyy[i]) - sy * sy / m - (sxy * sxy / sxx if sxx > 0 else 0.0)
        return max(rss, 0.0)

    def residuals(self, i: int, j: int) -> np.ndarray:
        """Residuals of the least-squares line through ``[i, j)`` (at least two samples)."""
        m = j - i
        sx, sy = self.cx[j] - self.cx[i], self.cy[j] - self.cy[i]
        sxx = float(self.cxx[j] - self.cxx[i] - sx * sx / m)
        slope = float(self.cxy[j] - self.cxy[i] - sx * sy / m) / sxx if sxx > 0 else 0.0
        xbar, ybar = float(sx) / m + self.xm, float(sy) / m + self.ym
        return self.y[i:j] - ybar - slope * (self.x[i:j] - xbar)

    def slope(self, i: int, j: int, floor: float) -> tuple[float, float, int]:
        """(slope, its standard error with the residual spread floored, samples) of ``[i, j)``."""
        m = j - i
        sx, sy = self.cx[j] - self.cx[i], self.cy[j] - self.cy[i]
        sxx = float(self.cxx[j] - self.cxx[i] - sx * sx / m)
        sxy = float(self.cxy[j] - self.cxy[i] - sx * sy / m)
        syy = float(self.cyy[j] - self.cyy[i] - sy * sy / m)
        slope = sxy / sxx
        s = math.sqrt(max(syy - slope * sxy, 0.0) / (m - 2))
        return slope, max(s, floor) / math.sqrt(sxx), m


def _last_break(sums: _Sums, lo: int, hi: int, n: int, min_run: int, floor: float) -> int | None:
    """Start of the current regime when ``[lo, n)`` is better told as two lines than as one.

    Bayesian information criterion of one line (2 parameters) against a line on ``[lo, b)``
    (2 parameters; a run of one or two samples costs one per sample) and another on
    ``[b, n)``, the break's unknown location counted as two more (a search over locations
    inflates the best gain; the usual modified BIC), for every ``b`` in ``(lo, hi]`` that
    leaves ``min_run`` samples after it. Residual sums are floored at ``floor**2`` per
    sample: a flat run between two allocator steps, or noise-free data, is no evidence of a
    new regime.
    """
    hi = min(hi, n - min_run)
    if hi <= lo:
        return None
    w = n - lo
    b = np.arange(lo + 1, hi + 1)
    f2 = floor * floor
    left = np.maximum(sums.rss(lo, b), (b - lo) * f2)
    right = np.maximum(sums.rss(b, n), (n - b) * f2)
    one = max(sums.rss_one(lo, n), w * f2)
    params = 2 + np.minimum(b - lo, 2)
    lr = w * np.log(one / np.maximum(left + right, 1e-300))
    k = int(np.argmax(lr - params * math.log(w)))
    if lr[k] <= params[k] * math.log(w):
        return None
    # autocorrelated residuals (memory that wanders, a staircase) inflate the likelihood
    # ratio by about (1 + r1) / (1 - r1), r1 their lag-1 autocorrelation under the two lines
    bk = int(b[k])
    r1 = max(_lag1(sums.residuals(lo, bk)) if bk - lo > 2 else 0.0, _lag1(sums.residuals(bk, n)))
    return bk if lr[k] * (1.0 - r1) / (1.0 + r1) > params[k] * math.log(w) else None


def _lag1(r: np.ndarray) -> float:
    """Lag-1 autocorrelation of residuals, clipped to [0, 0.95]."""
    rr = float(r @ r)
    if r.shape[0] < 3 or rr <= 0.0:
        return 0.0
    return min(max(float(r[1:] @ r[:-1]) / rr, 0.0), 0.95)


def _curvature(x: np.ndarray, y: np.ndarray, floor: float) -> tuple[float, float]:
    """(t statistic, lag-1 autocorrelation of the residuals) of the quadratic term of
    ``y = a + b*x + c*x**2`` fitted by least squares (at least four samples).

    ``t`` is ``c`` over its standard error, the residual spread floored at ``floor``;
    negative when the series decelerates (concave). The quadratic is fitted in an
    orthogonal basis (``x`` centred and scaled; ``x**2`` made orthogonal to 1 and ``x``), so
    that ``c`` is that of the plain fit while byte counts keep their precision.
    """
    n = x.shape[0]
    u = x - float(x.mean())
    scale = max(abs(float(u[0])), abs(float(u[-1]))) if n else 0.0
    if n < 4 or scale <= 0.0:
        return 0.0, 0.0
    u /= scale
    yc = y - float(y.mean())
    suu = float(u @ u)
    q = u * u
    q -= float(q.mean())
    q -= (float(q @ u) / suu) * u
    qq = float(q @ q)
    if qq <= 0.0:
        return 0.0, 0.0
    c = float(q @ yc) / qq
    resid = yc - (float(u @ yc) / suu) * u - c * q
    s = max(math.sqrt(max(float(resid @ resid), 0.0) / (n - 3)), floor)
    if s <= 0.0:
        return 0.0, 0.0
    return c * math.sqrt(qq) / s, _lag1(resid)


@dataclass
class _Window:
    start: int  # first sample of the fit
    kept_from: int  # first sample of the current regime (before any halving; <= start)
    floor: float  # floor on the residual spread
    note: str
    resolution: float = 0.0  # the floor the regime tests used (measurement resolution)


@dataclass
class _Estimate:
    point: float
    lower: float
    upper: float
    slope: float
    window: int
    crossing: float | None
    note: str = ""
    lower_reach: float = -math.inf  # lower bound at the reach (see _fit)
    reach: float = math.nan  # the step certainty is claimed up to
    xs: np.ndarray | None = None  # the fitted samples (for the statsmodels confirmation)
    ys: np.ndarray | None = None
    kept_from: int = 0
    excursion: float = 0.0  # largest sample above the fitted line in the window


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
        self._raw = _Buffer()  # the memory series as sampled
        self._inv = _Buffer()  # inverse reuse ratio (reuse mode only)
        self._observed_peak = 0.0  # physical peak since start
        self._reuse_mode: bool | None = None
        self._points = _Buffer()  # point forecast after each update (index = samples - 1)
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

        self._steps.append(step)
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
    def _select_window(self, x: np.ndarray, y: np.ndarray, floor: float, breaks: bool = True) -> _Window:
        """The current regime: from the last significant break (start-up transient, level
        shift, ramp that turned into a plateau), then halved while it flattens. See the
        module docstring."""
        opts = self.options
        n = x.shape[0]
        lo = n - min(n, opts.max_window)
        total = n - lo
        # measurement resolution: keeps noise-free series away from 0/0 and from reading
        # rounding errors as structure
        spread = max(floor, 1e-6 * float(np.max(np.abs(y[lo:]))), 0.5)
        sums = _Sums(x[lo:], y[lo:])
        min_run = max(4, opts.min_half)
        notes: list[str] = []
        start = 0
        if breaks and opts.regime_breaks:
            hi = int(opts.max_break_fraction * total)  # the regime keeps the rest of the window
            for _ in range(2):  # a second break, inside the regime found first
                b = _last_break(sums, start, hi, total, min_run, spread)
                if b is None:
                    break
                start = b
            if start > 0:
                notes.append(f"regime change: fit from step {float(x[lo + start]):g}")
        kept = start
        w = total - start
        while w >= 2 * opts.min_half:
            half = w // 2
            mid = total - half
            old, se_old, m_old = sums.slope(total - w, mid, spread)
            recent, se_recent, m_recent = sums.slope(mid, total, spread)
            tq = t_quantile(opts.confidence, min(m_old, m_recent) - 2)
            gap = tq * math.hypot(se_old, se_recent)
            if not (old > 0 and recent < opts.decel_ratio * old and old - recent > gap):
                break
            w = half
            notes.append(f"flattening: fit on the last {w} samples")
        return _Window(
            start=lo + total - w, kept_from=lo + kept, floor=floor, note="; ".join(notes), resolution=spread
        )

    def _fit(
        self, x: np.ndarray, y: np.ndarray, at: float, floor: float, breaks: bool = True, point: bool = True
    ) -> _Estimate:
        """Line and bounds on the current regime of ``(x, y)``; with ``point``, also the
        point forecast of the peak (see the module docstring), else the line at ``at``."""
        opts = self.options
        win = self._select_window(x, y, floor, breaks)
        xs, ys = x[win.start :], y[win.start :]
        fit = fit_line(xs, ys)
        # certainty is only claimed this far ahead: a linear trend is not trusted beyond
        # max_extrapolation times the span over which it was observed
        reach = min(at, float(xs[0]) + opts.max_extrapolation * (float(xs[-1]) - float(xs[0])))
        note = win.note
        if point and opts.deceleration_test and fit.n >= 6:
            # ... and not at all when the window is significantly concave (the line is the
            # wrong model there: a KV cache filling towards a steady level); the t statistic
            # deflated for autocorrelated residuals as in the regime tests
            t, r1 = _curvature(xs, ys, win.resolution)
            t *= math.sqrt((1.0 - r1) / (1.0 + r1))
            if t < -t_quantile(opts.confidence, fit.n - 3):
                reach = float(xs[-1])
                note = "; ".join(filter(None, [note, f"decelerating (quadratic t = {t:.1f}): no extrapolation"]))
        if point:
            reach, why = self._extrapolation_limits(fit, xs, y, win.start, reach)
            note = "; ".join(filter(None, [note, why]))
        lower, upper = fit.bounds(at, opts.confidence, floor)
        lower_reach = fit.bounds(reach, opts.confidence, floor)[0]
        if point and opts.autocorrelated_bounds and fit.n >= 4:
            # the certainty bound with the AR(1) effective sample size: a staircase's flat runs
            # or a wandering level are fewer independent observations than samples
            r1 = _lag1(ys - (fit.slope * xs + fit.intercept))
            if r1 > 0.0:
                n_eff = fit.n * (1.0 - r1) / (1.0 + r1)
                t = t_quantile(opts.confidence, max(1, int(n_eff) - 2))
                half = t * fit.obs_se(reach, floor) * math.sqrt((1.0 + r1) / (1.0 - r1))
                lower_reach = min(lower_reach, fit.predict(reach) - half)
        crossing = (self.capacity_bytes - fit.intercept) / fit.slope if fit.slope > 0 else None
        estimate = _Estimate(
            fit.predict(at), lower, upper, fit.slope, fit.n, crossing, note, lower_reach, reach, xs, ys,
            win.kept_from,
        )
        if not point:
            return estimate
        resid = ys - (fit.slope * xs + fit.intercept)
        estimate.excursion = max(0.0, float(np.max(resid)))
        # information criterion: a slope the samples do not support (t**2 < log n, BIC of a
        # line against a constant) is not extrapolated; the point forecast of a flat regime
        # is its level plus the largest excursion above it, i.e. its own peak. Memory that
        # wanders (a server's KV cache as requests come and go) has autocorrelated
        # residuals: t**2 is scaled by (1 - r1) / (1 + r1), r1 their lag-1 autocorrelation
        # (the AR(1) effective sample size), so that a slow wander is not read as a trend.
        se = max(fit.s, floor) / math.sqrt(fit.sxx)
        if se > 0:
            r1 = _lag1(resid)
            if (fit.slope / se) ** 2 * (1.0 - r1) / (1.0 + r1) < math.log(fit.n):
                estimate.point, estimate.excursion = float(np.max(ys)), 0.0
        return estimate

    def _extrapolation_limits(self, fit, xs: np.ndarray, y: np.ndarray, start: int, reach: float) -> tuple[float, str]:
        """Two kinds of memory rise that end by themselves, whatever their samples' fit:

        - **warm-up**: the job loading its working set (weights, a first batch, a cache). Its
          mark: within the current regime the memory more than doubled (the line's rise
          across the window exceeds its level at the window's start). Nothing in a load
          ramp's samples says where it stops; it is the job's size being established, not
          growth beyond it. Certainty reaches only ``warmup_reach_samples`` sampling intervals
          past the latest sample (the time the watch needs to act before an out-of-memory),
          until a regime holds the bulk of the memory (growth on top of a loaded level): a
          load that stops short of the partition is never extrapolated into it, and one that
          does not stop is caught just before it crosses instead of by the crash;
        - **refill**: the trend is still below a level the job already *held* (two samples in
          a row, so that a single-sample spike does not count) before this regime. Memory
          coming back up within the job's own range is not new growth.

        Both are priors about how jobs use memory, stated here so they can be challenged.
        """
        opts = self.options
        latest = float(xs[-1])
        if reach <= latest:
            return reach, ""
        lvl1 = fit.predict(latest)
        for label, at in (("within the regime", float(xs[0])), ("since the job started, along this trend", float(self._steps.view()[0]))):
            lvl0 = fit.predict(at)
            if opts.warmup_rule and lvl1 - lvl0 > max(lvl0, 0.0):
                ahead = opts.warmup_reach_samples * (latest - float(xs[0])) / max(1, fit.n - 1)
                near = latest + max(ahead, opts.act_within)
                return min(reach, near), (
                    f"warm-up (memory more than doubled {label}, {lvl0:.3g} -> {lvl1:.3g}): "
                    f"extrapolated {max(ahead, opts.act_within):.3g} steps ahead only "
                    f"({opts.warmup_reach_samples:g} samples, or the time to act {opts.act_within:g})"
                )
        if opts.evidence_per_span > 0:
            # evidence grows with the distance: a trend resting on n_eff independent
            # observations is trusted for n_eff / evidence_per_span times its span
            r1 = _lag1(y[start:] - (fit.slope * xs + fit.intercept)) if opts.autocorrelated_bounds else 0.0
            n_eff = fit.n * (1.0 - r1) / (1.0 + r1)
            limit = latest + max(0.0, n_eff / opts.evidence_per_span - 1.0) * (latest - float(xs[0]))
            if limit < reach:
                reach = limit
        if opts.history_rule and start >= 2:
            held = float(np.max(np.minimum(y[: start - 1], y[1:start])))
            if lvl1 <= held:
                return latest, f"refill below the level {held:.3g} the job already held: no extrapolation"
        return reach, ""

    def _forecast(self) -> Forecast:
        opts = self.options
        n = self._steps.n
        x = self._steps.view()
        step = float(x[-1])
        at = max(self.horizon, step)
        observed = self._observed_peak
        ready = n >= opts.min_samples
        capacity = self.capacity_bytes

        est: _Estimate | None = None
        raw = peak = ifit = None
        if n >= 3:
            y = self._raw.view()
            floor = opts.noise_floor_bytes
            raw = self._fit(x, y, at, floor)  # what the job uses now
            # the thesis' signal, peak since start, taken from the start of the current regime
            k = raw.kept_from
            peak = raw
            if n - k >= 3:
                peak = self._fit(x[k:], np.maximum.accumulate(y[k:]), at, floor, breaks=False, point=False)
            if self._reuse_mode:
                ifit = self._fit(x, self._inv.view(), at, 0.0)
                ipoint, ilo, ihi = max(ifit.point, 1.0), max(ifit.lower, 1.0), max(ifit.upper, 1.0)
                for e in {id(raw): raw, id(peak): peak}.values():
                    e.point, e.lower, e.upper, e.crossing = e.point / ipoint, e.lower / ihi, e.upper / ilo, None
                    e.lower_reach = e.lower_reach / ihi  # conservative: inverse ratio at the horizon
                    e.excursion = e.excursion / ipoint
            # Point forecast of the peak: the memory's line at the horizon plus the largest
            # excursion above it seen in the window (a staircase's half step, noise), or the
            # regime's own peak when it is flat. Upper bound: also the running-peak fit (the
            # thesis' signal). Certainty: the memory series alone; the running maximum of
            # noise rises (like log n) in clean steps and would raise false alarms.
            est = _Estimate(
                point=raw.point + raw.excursion,
                lower=raw.lower,
                upper=max(peak.upper, raw.upper + raw.excursion),
                slope=raw.slope,
                window=raw.window,
                crossing=raw.crossing,
                note=raw.note,
                lower_reach=raw.lower_reach,
            )
            # convergence is judged on the memory's own forecast: the running maximum of a
            # noisy series jumps, and its forecast with it, long after the trend has settled
            self._points.append(max(raw.point, observed))
        else:
            self._points.append(observed)

        if est is None:
            predicted = lower = upper = observed
            slope, window, crossing, note = 0.0, n, None, ""
        else:
            predicted = max(est.point, observed)
            lower = max(min(est.lower, predicted), observed)
            upper = max(est.upper, predicted)
            slope, window, crossing, note = est.slope, est.window, est.crossing, est.note

        already = observed > capacity
        confident = already or (ready and self._converged())
        will_exceed = already or (ready and est is not None and est.lower_reach > capacity)
        if (
            will_exceed
            and not already
            and confident
            and self._warn_step is None
            and opts.confirm_with_statsmodels
            and raw is not None
        ):
            will_exceed = self._confirm(raw, ifit, capacity)
        may_exceed = already or (ready and upper > capacity)
        warn = will_exceed and confident
        if already:
            reason = f"observed peak {observed:.0f} already above capacity {capacity:.0f}"
        elif not ready:
            reason = f"{n} of {opts.min_samples} samples needed before a forecast"
        else:
            reason = (
                f"peak at step {at:g}: {predicted:.0f} bytes, {opts.confidence:.0%} bounds "
                f"[{lower:.0f}, {upper:.0f}] vs capacity {capacity:.0f}; "
                + ("converged" if confident else "not converged yet")
            )
            if note:
                reason += f"; {note}"
        return Forecast(
            step=step,
            samples=n,
            capacity_bytes=int(capacity),
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

    def _confirm(self, raw: _Estimate, ifit: _Estimate | None, capacity: float) -> bool:
        """Recompute the deciding lower bound with statsmodels (``obs_ci_lower`` of
        ``OLS.get_prediction(...).summary_frame``) on the same samples; the more conservative
        of the two bounds decides. Runs only until the first warning, so it stays off the
        hot path."""
        if raw.xs is None or raw.ys is None:
            return raw.lower_reach > capacity
        _, sm_lower, _ = statsmodels_bounds(raw.xs, raw.ys, raw.reach, self.options.confidence)
        if ifit is not None:  # reuse mode: physical = requested / inverse ratio (its upper bound)
            sm_lower /= max(ifit.upper, 1.0)
        if min(raw.lower_reach, sm_lower) <= capacity:
            log.debug("statsmodels' obs_ci_lower %.0f does not confirm the closed-form bound; no warning", sm_lower)
            return False
        return True

    def _converged(self) -> bool:
        opts = self.options
        n = self._points.n
        span = max(opts.converge_updates, int(math.ceil(opts.converge_fraction * n)))
        if span > n:
            return False
        recent = self._points.view()[n - span :]
        current = float(recent[-1])
        scale = max(abs(current), 1.0)
        return float(np.max(np.abs(recent - current))) <= opts.converge_tol * scale
