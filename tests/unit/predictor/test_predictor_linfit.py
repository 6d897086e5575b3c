import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.linfit import fit_line, statsmodels_bounds, t_quantile


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(min_value=3, max_value=60),
    slope=st.floats(-1e6, 1e6),
    noise=st.floats(1.0, 1e7),
    horizon=st.floats(0, 1e4),
    seed=st.integers(0, 2**31 - 1),
)
def test_closed_form_bounds_agree_with_statsmodels(n, slope, noise, horizon, seed):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.choice(np.arange(0, 10 * n), size=n, replace=False)).astype(float)
    y = 5e9 + slope * x + rng.normal(0, noise, n)
    fit = fit_line(x, y)
    lo, hi = fit.bounds(horizon, 0.99)
    mean, sm_lo, sm_hi = statsmodels_bounds(x, y, horizon, 0.99)
    scale = max(abs(mean), 1.0)
    assert fit.predict(horizon) == pytest.approx(mean, rel=1e-7, abs=1e-6 * scale)
    assert hi == pytest.approx(sm_hi, rel=1e-7, abs=1e-6 * scale)
    assert lo == pytest.approx(sm_lo, rel=1e-7, abs=1e-6 * scale)


def test_one_sided_99_is_two_sided_alpha_002():
    assert t_quantile(0.99, 10) == pytest.approx(2.763769, rel=1e-6)


def test_interval_widens_with_extrapolation():
    x = np.arange(10, dtype=float)
    y = 2 * x + np.array([0.1, -0.2, 0.05, 0.3, -0.1, 0.0, 0.2, -0.3, 0.1, -0.05])
    fit = fit_line(x, y)
    near = fit.obs_se(10)
    far = fit.obs_se(1000)
    assert far > 50 * near
    assert fit.obs_se(5, noise_floor=10.0) >= 10.0


def test_fit_rejects_too_few_points_and_constant_x():
    with pytest.raises(ValueError, match="at least 3"):
        fit_line(np.array([0.0, 1.0]), np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="equal"):
        fit_line(np.array([1.0, 1.0, 1.0]), np.array([1.0, 2.0, 3.0]))


def test_perfect_line_has_zero_spread():
    x = np.arange(5, dtype=float)
    fit = fit_line(x, 3 * x + 1)
    assert fit.slope == pytest.approx(3)
    assert fit.intercept == pytest.approx(1)
    assert fit.s == pytest.approx(0, abs=1e-9)
    assert math.isclose(*fit.bounds(100), abs_tol=1e-6)
