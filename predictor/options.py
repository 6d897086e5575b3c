"""The forecaster's tuning knobs (:class:`ForecasterOptions`); the module docstring of
:mod:`predictor.forecast` says what each rule does."""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["ForecasterOptions"]


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
    converge_by_error: bool = False  # ... or by no more than the line's own sampling error at the horizon (off: see stress.py --converge-by-error)
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
