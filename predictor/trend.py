"""The line, its bounds and the point forecast of a series' current regime (:func:`fit_trend`).

See the module docstring of :mod:`predictor.forecast` for the rules.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from predictor.linfit import LineFit, fit_line, t_quantile
from predictor.options import ForecasterOptions
from predictor.reach import limit_reach, span_reach
from predictor.regime import select_window
from predictor.residuals import lag1

__all__ = ["Estimate", "fit_trend"]


@dataclass
class Estimate:
    """One series' forecast at the horizon, before it is combined into a ``Forecast``."""

    point: float
    lower: float
    upper: float
    slope: float
    window: int
    crossing: float | None
    note: str = ""
    lower_reach: float = -math.inf  # lower bound at the reach (see fit_trend)
    reach: float = math.nan  # the step certainty is claimed up to
    xs: np.ndarray | None = None  # the fitted samples (for the statsmodels confirmation)
    ys: np.ndarray | None = None
    kept_from: int = 0
    excursion: float = 0.0  # largest sample above the fitted line in the window
    point_se: float = 0.0  # standard error of the line at the horizon (its sampling error)


def fit_trend(
    x: np.ndarray,
    y: np.ndarray,
    at: float,
    floor: float,
    capacity: float,
    opts: ForecasterOptions,
    first_step: float,
    breaks: bool = True,
    point: bool = True,
) -> Estimate:
    """Line and bounds on the current regime of ``(x, y)``; with ``point``, also the
    point forecast of the peak (see the module docstring of :mod:`predictor.forecast`),
    else the line at ``at``. ``first_step``: the job's first sample (for the warm-up rule)."""
    win = select_window(x, y, floor, opts, breaks)
    xs, ys = x[win.start :], y[win.start :]
    fit = fit_line(xs, ys)
    # certainty is only claimed this far ahead: a linear trend is not trusted beyond
    # max_extrapolation times the span over which it was observed
    reach = span_reach(xs, at, opts)
    note = win.note
    if point:
        reach, why = limit_reach(fit, xs, y, win, reach, first_step, opts)
        note = "; ".join(filter(None, [note, why]))
    lower, upper = fit.bounds(at, opts.confidence, floor)
    lower_reach = fit.bounds(reach, opts.confidence, floor)[0]
    if point and opts.autocorrelated_bounds and fit.n >= 4:
        lower_reach = _autocorrelated_lower(fit, xs, ys, reach, floor, lower_reach, opts)
    crossing = (capacity - fit.intercept) / fit.slope if fit.slope > 0 else None
    estimate = Estimate(
        fit.predict(at), lower, upper, fit.slope, fit.n, crossing, note, lower_reach, reach, xs, ys,
        win.kept_from, point_se=fit.mean_se(at, floor),
    )
    if point:
        _set_point(estimate, fit, xs, ys, floor)
    return estimate


def _autocorrelated_lower(
    fit: LineFit, xs: np.ndarray, ys: np.ndarray, reach: float, floor: float, lower: float, opts: ForecasterOptions
) -> float:
    """The certainty bound ``lower`` at ``reach``, lowered with the AR(1) effective sample
    size: a staircase's flat runs or a wandering level are fewer independent observations
    than samples."""
    r1 = lag1(ys - (fit.slope * xs + fit.intercept))
    if r1 > 0.0:
        n_eff = fit.n * (1.0 - r1) / (1.0 + r1)
        t = t_quantile(opts.confidence, max(1, int(n_eff) - 2))
        half = t * fit.obs_se(reach, floor) * math.sqrt((1.0 + r1) / (1.0 - r1))
        lower = min(lower, fit.predict(reach) - half)
    return lower


def _set_point(estimate: Estimate, fit: LineFit, xs: np.ndarray, ys: np.ndarray, floor: float) -> None:
    """The point forecast: the line plus the largest excursion above it in the window, or
    the regime's own peak when the slope is not supported by the samples."""
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
        r1 = lag1(resid)
        if (fit.slope / se) ** 2 * (1.0 - r1) / (1.0 + r1) < math.log(fit.n):
            estimate.point, estimate.excursion = float(np.max(ys)), 0.0
