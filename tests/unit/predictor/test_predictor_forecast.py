import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.decision import H100_80GB_PARTITIONS_GIB, decide, gib_sizes
from predictor.forecast import Forecaster, ForecasterOptions, next_partition_for

GIB = 1 << 30


def linear(n, base=4 * GIB, slope=0.01 * GIB, noise=0.02 * GIB, seed=0):
    rng = random.Random(seed)
    return [(i, base + slope * i + rng.gauss(0, noise)) for i in range(n)]


def test_linear_growth_warns_before_crossing_and_sizes_the_next_partition():
    rows = linear(1000)  # crosses 10 GiB at step 600
    d = decide(rows, 10 * GIB, horizon=999)
    assert d.warn_step is not None and d.warn_step <= 72  # ~0.1 N; certainty reaches 10x the span
    assert d.will_exceed and d.confident
    assert d.predicted_peak_bytes == pytest.approx(4 * GIB + 9.99 * GIB, rel=0.02)
    assert d.next_partition == 20 * GIB
    assert d.crossing_step == pytest.approx(600, rel=0.05)


def test_flat_noisy_series_never_warns():
    rng = random.Random(3)
    rows = [(i, 6 * GIB + rng.gauss(0, 0.2 * GIB)) for i in range(500)]
    d = decide(rows, 8 * GIB, horizon=499)
    assert d.warn_step is None and not d.will_exceed


def test_training_plateau_after_warmup_never_warns():
    rng = random.Random(1)
    rows = [(i, 2 * GIB if i == 0 else 8 * GIB if i < 3 else 8 * GIB + rng.random() * 0.5 * GIB) for i in range(2000)]
    assert decide(rows, 9 * GIB, horizon=1999).warn_step is None


def test_staircase_allocator_growth_warns_before_crossing():
    rows = [(i, 4 * GIB + (i // 50) * 0.5 * GIB) for i in range(1000)]  # crosses 8 GiB at 400
    d = decide(rows, 8 * GIB, horizon=999)
    assert d.warn_step is not None and d.warn_step < 400


def test_no_decision_before_min_samples():
    f = Forecaster(1 * GIB, 1000, min_samples=6)
    for i in range(5):
        fc = f.update(i, 0.5 * GIB + i * 0.1 * GIB)
        assert not fc.ready and not fc.warn and fc.next_partition is None
    assert f.update(5, 1.0 * GIB).ready


def test_already_above_capacity_is_certain():
    f = Forecaster(1 * GIB, 100)
    fc = f.update(0, 2 * GIB)
    assert fc.will_exceed and fc.confident and fc.warn and fc.warn_step == 0
    assert "already above" in fc.reason


def test_warn_step_is_sticky_and_first():
    f = Forecaster(10 * GIB, 999)
    first = None
    for step, value in linear(300):
        fc = f.update(step, value)
        if fc.warn and first is None:
            first = step
        if first is not None:
            assert fc.warn_step == first
    assert f.warn_step == first


def test_steps_must_increase_and_values_be_sane():
    f = Forecaster(GIB, 10)
    f.update(1, 1)
    with pytest.raises(ValueError, match="strictly increase"):
        f.update(1, 2)
    with pytest.raises(ValueError, match="negative"):
        f.update(2, -1)
    with pytest.raises(ValueError, match="finite"):
        f.update(3, float("nan"))
    with pytest.raises(ValueError):
        Forecaster(0, 10)
    with pytest.raises(ValueError, match="confidence"):
        ForecasterOptions(confidence=1.0)


def test_reuse_ratio_variant_divides_requested_memory():
    # requested memory grows; reuse improves (ratio falls) so physical memory stays flat
    rows = [(i, 4 * GIB + 0.02 * GIB * i, 4 * GIB / (4 * GIB + 0.02 * GIB * i)) for i in range(300)]
    d = decide(rows, 5 * GIB, horizon=299)
    assert d.warn_step is None
    assert d.predicted_peak_bytes == pytest.approx(4 * GIB, rel=0.02)
    plain = decide([(s, b) for s, b, _ in rows], 5 * GIB, horizon=299)
    assert plain.warn_step is not None  # without the ratio, the requested memory would alarm
    f = Forecaster(GIB, 10)
    f.update(0, 1, 0.5)
    with pytest.raises(ValueError, match="every sample"):
        f.update(1, 1)
    with pytest.raises(ValueError, match="reuse_ratio"):
        f.update(2, 1, 1.5)


def test_next_partition_for():
    sizes = gib_sizes(H100_80GB_PARTITIONS_GIB)
    assert next_partition_for(5 * GIB, sizes) == 10 * GIB
    assert next_partition_for(10 * GIB, sizes) == 10 * GIB
    assert next_partition_for(81 * GIB, sizes) is None
    assert next_partition_for(1, None) is None


def test_horizon_before_latest_step_forecasts_now():
    f = Forecaster(GIB, 5)
    for i in range(10):
        fc = f.update(i, 100 + i)
    assert fc.horizon == 9
    assert fc.predicted_peak_bytes == 109


@settings(max_examples=20, deadline=None)
@given(
    level=st.floats(0.5, 60),
    noise=st.floats(0, 0.05),
    n=st.integers(6, 300),
    seed=st.integers(0, 10_000),
)
def test_property_flat_series_below_capacity_never_warns(level, noise, n, seed):
    rng = random.Random(seed)
    rows = [(i, level * GIB * (1 + noise * rng.uniform(-1, 1))) for i in range(n)]
    d = decide(rows, level * GIB * 1.2, horizon=n * 10)
    assert d.warn_step is None


@settings(max_examples=20, deadline=None)
@given(n=st.integers(3, 200), seed=st.integers(0, 10_000))
def test_property_bounds_are_ordered(n, seed):
    rng = random.Random(seed)
    f = Forecaster(10 * GIB, 1000, partition_sizes=gib_sizes((10, 20, 40, 80)))
    value = GIB
    for i in range(n):
        value += rng.uniform(-0.05, 0.1) * GIB
        fc = f.update(i, max(value, 0))
        assert fc.observed_peak_bytes <= fc.lower_bytes + 1
        assert fc.lower_bytes <= fc.predicted_peak_bytes + 1 <= fc.upper_bytes + 2
        assert not (fc.warn and not fc.will_exceed)
        assert math.isfinite(fc.slope_bytes_per_step)
