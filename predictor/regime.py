"""The current regime of a memory series: the window the forecaster fits its line on.

From the last significant break (start-up transient, level shift, ramp that turned into a
plateau; Bayesian information criterion, deflated for autocorrelated residuals), then
halved while it flattens. See the module docstring of :mod:`predictor.forecast`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from predictor.linfit import t_quantile
from predictor.options import ForecasterOptions
from predictor.residuals import lag1

__all__ = ["PrefixSums", "Window", "last_break", "select_window"]


class PrefixSums:
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


def last_break(sums: PrefixSums, lo: int, hi: int, n: int, min_run: int, floor: float) -> int | None:
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
    r1 = max(lag1(sums.residuals(lo, bk)) if bk - lo > 2 else 0.0, lag1(sums.residuals(bk, n)))
    return bk if lr[k] * (1.0 - r1) / (1.0 + r1) > params[k] * math.log(w) else None


@dataclass
class Window:
    """The samples a line is fitted on, and why."""

    start: int  # first sample of the fit
    kept_from: int  # first sample of the current regime (before any halving; <= start)
    floor: float  # floor on the residual spread
    note: str
    resolution: float = 0.0  # the floor the regime tests used (measurement resolution)


def select_window(
    x: np.ndarray, y: np.ndarray, floor: float, opts: ForecasterOptions, breaks: bool = True
) -> Window:
    """The current regime of ``(x, y)``: from the last significant break (start-up
    transient, level shift, ramp that turned into a plateau), then halved while it
    flattens."""
    n = x.shape[0]
    lo = n - min(n, opts.max_window)
    total = n - lo
    # measurement resolution: keeps noise-free series away from 0/0 and from reading
    # rounding errors as structure
    spread = max(floor, 1e-6 * float(np.max(np.abs(y[lo:]))), 0.5)
    sums = PrefixSums(x[lo:], y[lo:])
    notes: list[str] = []
    start = 0
    if breaks and opts.regime_breaks:
        start = _regime_start(sums, total, spread, opts)
        if start > 0:
            notes.append(f"regime change: fit from step {float(x[lo + start]):g}")
    w = _plateau_width(sums, total, total - start, spread, opts, notes)
    return Window(
        start=lo + total - w, kept_from=lo + start, floor=floor, note="; ".join(notes), resolution=spread
    )


def _regime_start(sums: PrefixSums, total: int, spread: float, opts: ForecasterOptions) -> int:
    """Index (in the window) of the last significant break, searched for twice: a second
    break inside the regime found first. 0: none."""
    min_run = max(4, opts.min_half)
    hi = int(opts.max_break_fraction * total)  # the regime keeps the rest of the window
    start = 0
    for _ in range(2):  # a second break, inside the regime found first
        b = last_break(sums, start, hi, total, min_run, spread)
        if b is None:
            break
        start = b
    return start


def _plateau_width(
    sums: PrefixSums, total: int, w: int, spread: float, opts: ForecasterOptions, notes: list[str]
) -> int:
    """The regime's last ``w`` samples halved while the recent half's slope is significantly
    below ``decel_ratio`` times the older half's (a note added for each halving)."""
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
    return w
