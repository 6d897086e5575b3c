"""When a forecast may warn: convergence of the point forecasts, certainty of exceeding
the capacity, and statsmodels' confirmation of the first warning.

See the module docstring of :mod:`predictor.forecast` (the convergence rule, a warning
only when certain).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from predictor.linfit import statsmodels_bounds
from predictor.options import ForecasterOptions
from predictor.trend import Estimate

log = logging.getLogger(__name__)

__all__ = ["Verdict", "converged", "judge"]


@dataclass(frozen=True)
class Verdict:
    """What a forecast says about the capacity."""

    confident: bool  # the forecast has converged (or the job is already above capacity)
    will_exceed: bool  # certain to exceed the capacity by the horizon
    may_exceed: bool  # the upper bound exceeds the capacity
    warn: bool  # will_exceed on a confident forecast


def judge(
    *,
    observed: float,
    upper: float,
    capacity: float,
    ready: bool,
    est: Estimate | None,
    raw: Estimate | None,
    ifit: Estimate | None,
    points: np.ndarray,
    first_warning: bool,
    opts: ForecasterOptions,
) -> Verdict:
    """The verdict on one forecast: ``est`` the combined estimate, ``raw`` the memory's own
    (``ifit`` the inverse reuse ratio's, in reuse mode), ``points`` the point forecasts so
    far, ``first_warning`` true until the forecaster has warned once (only the first
    warning is confirmed with statsmodels)."""
    already = observed > capacity
    confident = already or (ready and converged(points, opts))
    will_exceed = already or (ready and est is not None and est.lower_reach > capacity)
    if (
        will_exceed
        and not already
        and confident
        and first_warning
        and opts.confirm_with_statsmodels
        and raw is not None
    ):
        will_exceed = confirm(raw, ifit, capacity, opts.confidence)
    may_exceed = already or (ready and upper > capacity)
    return Verdict(confident=confident, will_exceed=will_exceed, may_exceed=may_exceed, warn=will_exceed and confident)


def converged(points: np.ndarray, opts: ForecasterOptions) -> bool:
    """Whether the point forecasts ``points`` (one per update) moved by at most
    ``converge_tol`` (relative) over the last ``converge_fraction`` of them and at least
    ``converge_updates``."""
    n = points.shape[0]
    span = max(opts.converge_updates, int(math.ceil(opts.converge_fraction * n)))
    if span > n:
        return False
    recent = points[n - span :]
    current = float(recent[-1])
    scale = max(abs(current), 1.0)
    return float(np.max(np.abs(recent - current))) <= opts.converge_tol * scale


def confirm(raw: Estimate, ifit: Estimate | None, capacity: float, confidence: float) -> bool:
    """Recompute the deciding lower bound with statsmodels (``obs_ci_lower`` of
    ``OLS.get_prediction(...).summary_frame``) on the same samples; the more conservative
    of the two bounds decides. Runs only until the first warning, so it stays off the
    hot path."""
    if raw.xs is None or raw.ys is None:
        return raw.lower_reach > capacity
    _, sm_lower, _ = statsmodels_bounds(raw.xs, raw.ys, raw.reach, confidence)
    if ifit is not None:  # reuse mode: physical = requested / inverse ratio (its upper bound)
        sm_lower /= max(ifit.upper, 1.0)
    if min(raw.lower_reach, sm_lower) <= capacity:
        log.debug("statsmodels' obs_ci_lower %.0f does not confirm the closed-form bound; no warning", sm_lower)
        return False
    return True
