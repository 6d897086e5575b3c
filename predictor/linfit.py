"""Ordinary least squares on one regressor, with prediction intervals in closed form.

This is the hot path of the forecaster: one fit and one bound per sample, well under a
millisecond with numpy. The math is the textbook OLS prediction interval for a new
observation at ``x0`` (the same one statsmodels reports as ``obs_ci_lower/upper``):

    se_obs(x0) = s * sqrt(1 + 1/n + (x0 - xbar)^2 / Sxx),   s^2 = RSS / (n - 2)
    bound      = yhat(x0) +/- t_{q, n-2} * se_obs(x0)

Unlike the MIG thesis' ``a*T + b + z*sigma``, the ``(x0 - xbar)^2 / Sxx`` term widens the
bound the further the horizon lies beyond the samples, and Student's t replaces z for the
few samples seen early in a job. :func:`statsmodels_bounds` computes the same numbers
through statsmodels and is the reference the tests compare against.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["LineFit", "fit_line", "t_quantile", "statsmodels_bounds"]


@lru_cache(maxsize=4096)
def t_quantile(q: float, df: int) -> float:
    """Quantile ``q`` of Student's t with ``df`` degrees of freedom (``scipy.stats.t.ppf``).

    Through the ufunc ``scipy.special.stdtrit`` that ``t.ppf`` ends in: a microsecond
    instead of a few hundred (the distribution object's argument checks), and cached.
    """
    from scipy.special import stdtrit  # scipy comes with statsmodels; imported once, on first use

    return float(stdtrit(df, q))


@dataclass(frozen=True)
class LineFit:
    """A fitted line ``y = slope * x + intercept`` and what its prediction interval needs."""

    n: int
    slope: float
    intercept: float
    s: float  # residual standard deviation, sqrt(RSS / (n - 2))
    xbar: float
    sxx: float

    def predict(self, x0: float) -> float:
        return self.slope * x0 + self.intercept

    def mean_se(self, x0: float, noise_floor: float = 0.0) -> float:
        """Standard error of the line itself at ``x0`` (of the mean, not of a new observation)."""
        s = max(self.s, noise_floor)
        return s * math.sqrt(1.0 / self.n + (x0 - self.xbar) ** 2 / self.sxx)

    def obs_se(self, x0: float, noise_floor: float = 0.0) -> float:
        """Standard error of a new observation at ``x0``."""
        s = max(self.s, noise_floor)
        return s * math.sqrt(1.0 + 1.0 / self.n + (x0 - self.xbar) ** 2 / self.sxx)

    def bounds(self, x0: float, confidence: float = 0.99, noise_floor: float = 0.0) -> tuple[float, float]:
        """One-sided ``confidence`` lower and upper prediction bounds at ``x0``.

        Each bound alone holds with probability ``confidence`` (two-sided alpha is
        ``2 * (1 - confidence)``).
        """
        half = t_quantile(confidence, self.n - 2) * self.obs_se(x0, noise_floor)
        y = self.predict(x0)
        return y - half, y + half


def fit_line(x: np.ndarray, y: np.ndarray) -> LineFit:
    """OLS fit of ``y`` on ``x`` (1-D float arrays of the same length, at least 3 points,
    at least two distinct ``x``)."""
    n = int(x.shape[0])
    if n < 3:
        raise ValueError(f"a line with a prediction interval needs at least 3 points, got {n}")
    xbar = float(x.mean())
    ybar = float(y.mean())
    dx = x - xbar
    sxx = float(dx @ dx)
    if sxx <= 0.0:
        raise ValueError("all x values are equal; cannot fit a slope")
    dy = y - ybar
    slope = float(dx @ dy) / sxx
    intercept = ybar - slope * xbar
    resid = dy - slope * dx
    rss = float(resid @ resid)
    s = math.sqrt(max(rss, 0.0) / (n - 2))
    return LineFit(n=n, slope=slope, intercept=intercept, s=s, xbar=xbar, sxx=sxx)


def statsmodels_bounds(x, y, x0: float, confidence: float = 0.99) -> tuple[float, float, float]:
    """(mean, one-sided lower, one-sided upper) at ``x0`` through statsmodels OLS.

    The reference implementation: ``get_prediction(...).summary_frame(alpha)`` gives a
    two-sided interval, so a one-sided ``confidence`` bound uses ``alpha = 2*(1-confidence)``.
    Slow (imports statsmodels); use :func:`fit_line` on hot paths.
    """
    from statsmodels.regression.linear_model import OLS  # lighter than statsmodels.api

    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    model = OLS(ya, np.column_stack([np.ones_like(xa), xa])).fit()
    frame = model.get_prediction(np.array([[1.0, float(x0)]])).summary_frame(alpha=2.0 * (1.0 - confidence))
    return (
        float(frame["mean"].iloc[0]),
        float(frame["obs_ci_lower"].iloc[0]),
        float(frame["obs_ci_upper"].iloc[0]),
    )
