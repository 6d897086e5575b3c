"""What the residuals of a fitted window say: their lag-1 autocorrelation (how many
independent observations the samples are worth) and the bend of a quadratic (whether the
window decelerates)."""
from __future__ import annotations

import math

import numpy as np

__all__ = ["curvature", "lag1"]


def lag1(r: np.ndarray) -> float:
    """Lag-1 autocorrelation of residuals, clipped to [0, 0.95]."""
    rr = float(r @ r)
    if r.shape[0] < 3 or rr <= 0.0:
        return 0.0
    return min(max(float(r[1:] @ r[:-1]) / rr, 0.0), 0.95)


def curvature(x: np.ndarray, y: np.ndarray, floor: float) -> tuple[float, float]:
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
    return c * math.sqrt(qq) / s, lag1(resid)
