"""How far ahead the forecaster claims certainty from a fitted line (its *reach*).

A linear trend is trusted up to ``max_extrapolation`` times the span it was observed over,
and less where the samples say it should not be extrapolated: a significantly concave
window (deceleration), a warm-up (memory more than doubled), too few independent samples
for the distance (evidence per span), memory coming back up below a level the job already
held (refill). See the module docstring of :mod:`predictor.forecast`.
"""
from __future__ import annotations

import math

import numpy as np

from predictor.linfit import LineFit, t_quantile
from predictor.options import ForecasterOptions
from predictor.regime import Window
from predictor.residuals import curvature, lag1

__all__ = ["limit_reach", "span_reach"]


def span_reach(xs: np.ndarray, at: float, opts: ForecasterOptions) -> float:
    """The horizon ``at``, but no further than ``max_extrapolation`` times the span of the
    fitted samples ``xs``: a linear trend is not trusted beyond that."""
    return min(at, float(xs[0]) + opts.max_extrapolation * (float(xs[-1]) - float(xs[0])))


def limit_reach(
    fit: LineFit,
    xs: np.ndarray,
    y: np.ndarray,
    win: Window,
    reach: float,
    first_step: float,
    opts: ForecasterOptions,
) -> tuple[float, str]:
    """``reach`` cut short by the deceleration test and the extrapolation limits, with a
    note saying why (empty when it was not). ``y`` is the whole series, ``xs`` the steps
    of the fitted window ``win``, ``first_step`` the job's first sample."""
    ys = y[win.start :]
    notes = []
    if opts.deceleration_test and fit.n >= 6:
        # ... and not at all when the window is significantly concave (the line is the
        # wrong model there: a KV cache filling towards a steady level); the t statistic
        # deflated for autocorrelated residuals as in the regime tests
        t, r1 = curvature(xs, ys, win.resolution)
        t *= math.sqrt((1.0 - r1) / (1.0 + r1))
        if t < -t_quantile(opts.confidence, fit.n - 3):
            reach = float(xs[-1])
            notes.append(f"decelerating (quadratic t = {t:.1f}): no extrapolation")
    reach, why = extrapolation_limits(fit, xs, y, win.start, reach, first_step, opts)
    return reach, "; ".join(filter(None, [*notes, why]))


def extrapolation_limits(
    fit: LineFit,
    xs: np.ndarray,
    y: np.ndarray,
    start: int,
    reach: float,
    first_step: float,
    opts: ForecasterOptions,
) -> tuple[float, str]:
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
    Between them, the evidence rule: a trend is trusted for ``n_eff / evidence_per_span``
    times its span.
    """
    latest = float(xs[-1])
    if reach <= latest:
        return reach, ""
    warmup = _warmup_limit(fit, xs, reach, first_step, opts)
    if warmup is not None:
        return warmup
    reach = _evidence_limit(fit, xs, y[start:], reach, opts)
    refill = _refill_limit(fit, latest, y, start, opts)
    if refill is not None:
        return refill
    return reach, ""


def _warmup_limit(
    fit: LineFit, xs: np.ndarray, reach: float, first_step: float, opts: ForecasterOptions
) -> tuple[float, str] | None:
    """The reach of a warm-up (memory more than doubled within the regime, or since the job
    started along this trend) and why; None when there is none."""
    latest = float(xs[-1])
    lvl1 = fit.predict(latest)
    for label, at in (("within the regime", float(xs[0])), ("since the job started, along this trend", first_step)):
        lvl0 = fit.predict(at)
        if opts.warmup_rule and lvl1 - lvl0 > max(lvl0, 0.0):
            ahead = opts.warmup_reach_samples * (latest - float(xs[0])) / max(1, fit.n - 1)
            near = latest + max(ahead, opts.act_within)
            return min(reach, near), (
                f"warm-up (memory more than doubled {label}, {lvl0:.3g} -> {lvl1:.3g}): "
                f"extrapolated {max(ahead, opts.act_within):.3g} steps ahead only "
                f"({opts.warmup_reach_samples:g} samples, or the time to act {opts.act_within:g})"
            )
    return None


def _evidence_limit(fit: LineFit, xs: np.ndarray, ys: np.ndarray, reach: float, opts: ForecasterOptions) -> float:
    """``reach``, no further than ``n_eff / evidence_per_span`` times the span past the
    latest sample: evidence grows with the distance, a trend resting on ``n_eff``
    independent observations is trusted that far."""
    if not opts.evidence_per_span > 0:
        return reach
    latest = float(xs[-1])
    r1 = lag1(ys - (fit.slope * xs + fit.intercept)) if opts.autocorrelated_bounds else 0.0
    n_eff = fit.n * (1.0 - r1) / (1.0 + r1)
    limit = latest + max(0.0, n_eff / opts.evidence_per_span - 1.0) * (latest - float(xs[0]))
    return min(reach, limit)


def _refill_limit(
    fit: LineFit, latest: float, y: np.ndarray, start: int, opts: ForecasterOptions
) -> tuple[float, str] | None:
    """No extrapolation (and why) while the trend is below a level the job held (two
    samples in a row) before the regime starting at ``start``; None otherwise."""
    if not (opts.history_rule and start >= 2):
        return None
    held = float(np.max(np.minimum(y[: start - 1], y[1:start])))
    if fit.predict(latest) <= held:
        return latest, f"refill below the level {held:.3g} the job already held: no extrapolation"
    return None
