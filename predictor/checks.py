"""Checks on the numbers a forecast is asked for: capacities, horizons, partition sizes.

A capacity or horizon of ``inf``/``nan``, zero or below is refused with a message naming
the quantity, never coerced (``int(inf)`` would end in an ``OverflowError`` deep inside a
forecast, ``nan`` compares false with everything and would silently disable warnings).
"""
from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["checked_horizon", "positive_finite", "partition_sizes"]


def positive_finite(what: str, value: float) -> float:
    """``value`` as a float when it is a finite number above 0; else ValueError naming ``what``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v <= 0.0:
        raise ValueError(f"{what} must be a finite number above 0, got {value!r}")
    return v


def partition_sizes(sizes: Iterable[float] | None, what: str = "partition size") -> tuple[int, ...] | None:
    """Partition sizes in bytes, each checked (finite, above 0), sorted; None when none given."""
    if not sizes:
        return None
    return tuple(sorted(int(positive_finite(what, s)) for s in sizes))


def checked_horizon(horizon: float | None, first_step: float, last_step: float) -> float:
    """The horizon of a whole series (``None``: its last step), checked: a finite number
    above 0, not before the series' last step (a job does not end before its own samples)."""
    if horizon is None:
        if not last_step > 0:
            raise ValueError(f"the series ends at step {last_step:g}: give a horizon above 0")
        return float(last_step)
    h = positive_finite("horizon", horizon)
    if h < last_step:
        raise ValueError(
            f"horizon {h:g} is before the series' last step {last_step:g} (its steps run from {first_step:g}); "
            "give the step the job runs to"
        )
    return h
