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

from predictor.linfit import statsmodels_bounds, t_quantile
from predictor.options import ForecasterOptions
from predictor.trend import Estimate

log = logging.getLogger(__name__)

__all__ = ["Verdict", "converged", "judge"]


@dataclass(frozen=True)
class Verdict:
    """What a forecast says about the capacity."""

    confident: bool  # the forecast has converged (or the job is already above capacity)
    will_exceed: bool  # certain to exceed the capacity by the horizon: exactly when lower > capacity
    may_exceed: bool  # the upper bound exceeds the capacity
    warn: bool  # will_exceed on a confident forecast
    lower: float  # the lower bound of the peak by the horizon that decided (observed <= lower <= predicted)


def judge(
    *,
    observed: float,
    predicted: float,
    upper: float,
    capacity: float,
    ready: bool,
    est: Estimate | None,
    raw: Estimate | None,
    ifit: Estimate | None,
    points: np.ndarray,
    first_warning: bool,
    opts: ForecasterOptions,
    known_lower: float = -math.inf,
    known_upper: float = math.inf,
) -> Verdict:
    """The verdict on one forecast: ``est`` the combined estimate, ``raw`` the memory's own
    (``ifit`` the inverse reuse ratio's, in reuse mode), ``points`` the point forecasts so
    far, ``first_warning`` true until the forecaster has warned once (only the first
    warning is confirmed with statsmodels).

    The lower bound is the one certainty rests on: the line's bound at its *reach* (as far
    as the trend is trusted; a bound on the peak by the horizon, since the peak is at least
    the memory at the reach), lowered to statsmodels' when that confirmation runs, and kept
    between the observed peak and the point forecast. ``will_exceed`` is that bound above
    the capacity, so the two never disagree. ``known_lower``: a lower bound from outside the
    samples (the workload's earlier runs, :mod:`predictor.prior`); it needs no convergence of
    this run's own trend, so it warns from the first sample. ``known_upper``: the highest the
    earlier runs say this run goes (lifted by how far it is above them): a trend that would
    carry it past the capacity while every earlier run, so lifted, stays under is not
    believed (the earlier runs have seen where this run goes; a run that leaves them lifts
    this bound with it)."""
    already = observed > capacity
    error = t_quantile(opts.confidence, max(1, raw.window - 2)) * raw.point_se if raw is not None else 0.0
    confident = already or (ready and converged(points, opts, error if opts.converge_by_error else 0.0))
    lower = est.lower_reach if (ready and est is not None) else -math.inf
    if lower > capacity and not already and confident and first_warning and opts.confirm_with_statsmodels:
        if raw is not None:
            lower = min(lower, confirm(raw, ifit, capacity, opts.confidence))
    lower = max(min(max(min(lower, known_upper), known_lower), predicted), observed)
    will_exceed = lower > capacity
    foreseen = known_lower > capacity  # the earlier runs all went past it: nothing to converge
    may_exceed = already or ((ready or foreseen) and upper > capacity)
    return Verdict(
        confident=confident or foreseen, will_exceed=will_exceed, may_exceed=may_exceed,
        warn=will_exceed and (confident or foreseen), lower=lower,
    )


def converged(points: np.ndarray, opts: ForecasterOptions, error: float = 0.0) -> bool:
    """Whether the point forecasts ``points`` (one per update) moved by at most
    ``converge_tol`` (relative), or by at most ``error`` (the current forecast's own
    sampling error: a movement the noise explains is no instability), over the last
    ``converge_fraction`` of them and at least ``converge_updates``."""
    n = points.shape[0]
    span = max(opts.converge_updates, int(math.ceil(opts.converge_fraction * n)))
    if span > n:
        return False
    recent = points[n - span :]
    current = float(recent[-1])
    scale = max(abs(current), 1.0)
    return float(np.max(np.abs(recent - current))) <= max(opts.converge_tol * scale, error)


def confirm(raw: Estimate, ifit: Estimate | None, capacity: float, confidence: float) -> float:
    """The deciding lower bound recomputed with statsmodels (``obs_ci_lower`` of
    ``OLS.get_prediction(...).summary_frame``) on the same samples; the caller keeps the
    more conservative of the two. Runs only until the first warning, so it stays off the
    hot path."""
    if raw.xs is None or raw.ys is None:
        return raw.lower_reach
    _, sm_lower, _ = statsmodels_bounds(raw.xs, raw.ys, raw.reach, confidence)
    if ifit is not None:  # reuse mode: physical = requested / inverse ratio (its upper bound)
        sm_lower /= max(ifit.upper, 1.0)
    if sm_lower <= capacity:
        log.debug("statsmodels' obs_ci_lower %.0f does not confirm the closed-form bound; no warning", sm_lower)
    return sm_lower
