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


# --------------------------------------------------------------------------- regimes and goals
import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402


import predictor  # noqa: E402
import predictor.certainty as certainty_mod  # noqa: E402
import predictor.reach as reach_mod  # noqa: E402
import predictor.regime as regime_mod  # noqa: E402
import predictor.residuals as residuals_mod  # noqa: E402
import predictor.trend as trend_mod  # noqa: E402
from predictor.series import read_series  # noqa: E402


def _make_series_module():
    path = Path(predictor.__file__).parent / "data" / "make_series.py"
    spec = importlib.util.spec_from_file_location("make_series_for_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def decode_like(n=400, spike=1.5 * GIB, seed=0):
    """Weights + a KV cache in 128 MiB allocator steps (one every 4 samples) + small noise;
    sample 0 is a prefill spike the cache only outgrows after ~50 samples."""
    rng = random.Random(seed)
    base = 15 * GIB
    rows = [(0, base + spike)]
    for i in range(1, n):
        rows.append((i * 16, base + (1 + i // 4) * 128 * 2**20 + rng.randint(0, 4) * 2**21))
    return rows


def test_prefill_spike_does_not_hide_growth():
    rows = decode_like()
    capacity = 20 * GIB
    crossing = next(s for s, b in rows if b > capacity)
    d = decide(rows, capacity, horizon=rows[-1][0])
    assert d.warn_step is not None and d.warn_step < 0.2 * crossing
    plain = decide(rows, capacity, horizon=rows[-1][0], options=ForecasterOptions(regime_breaks=False))
    assert plain.warn_step is None or plain.warn_step > 1.5 * d.warn_step  # the spike delays the plain fit
    f = Forecaster(capacity, rows[-1][0])
    for step, value in rows[:40]:  # 10 % of the run
        fc = f.update(step, value)
    assert "regime change" in fc.reason
    assert fc.predicted_peak_bytes == pytest.approx(max(b for _, b in rows), rel=0.03)


def test_warm_up_sample_is_left_out_of_the_forecast():
    # the real CPU training series (predictor/data): a low first sample, then flat with noise;
    # the forecast from its first 8 samples (10 % of the run) for the planned 200 steps
    series = read_series(Path(predictor.__file__).parent / "data" / "real_tinylm_cpu_train_plateau.csv")
    rows = list(zip(series.steps, series.bytes))[:8]
    peak = max(series.bytes)
    d = decide(rows, 1 * GIB, horizon=199)
    assert abs(d.predicted_peak_bytes - peak) / peak < 0.15 and d.warn_step is None
    plain = decide(rows, 1 * GIB, horizon=199, options=ForecasterOptions(regime_breaks=False))
    assert plain.predicted_peak_bytes > 2 * peak  # the warm-up, extrapolated


def test_level_shift_then_flat_never_warns():
    rng = random.Random(7)
    rows = [(i, ((0.80 if i < 8 else 0.86) + rng.gauss(0, 0.01)) * GIB) for i in range(60)]
    assert decide(rows, 1 * GIB, horizon=199).warn_step is None


def test_flat_noisy_series_forecasts_its_own_peak():
    # a slope of noise is not extrapolated (BIC): the forecast stays at the series' own peak,
    # but for the few seeds whose noise happens to pass the criterion
    extrapolated = 0
    for seed in range(20):
        rng = random.Random(seed)
        rows = [(i, 6 * GIB * (1 + rng.gauss(0, 0.03))) for i in range(100)]
        d = decide(rows, 8 * GIB, horizon=1000)
        assert d.warn_step is None
        extrapolated += d.predicted_peak_bytes > 1.02 * max(b for _, b in rows)
    assert extrapolated <= 2


def test_wandering_plateau_is_not_read_as_a_trend(monkeypatch):
    # a short ramp, then an AR(1) wander (lag-1 correlation 0.9) around a level: the KV
    # cache of a server as requests come and go
    def rows_for(seed):
        rng = random.Random(seed)
        rows, dev = [], 0.0
        for i in range(400):
            dev = 0.9 * dev + rng.gauss(0, 0.15 * GIB)
            rows.append((i * 100, (14 * GIB + i * GIB if i < 4 else 18 * GIB) + dev))
        return rows

    def mean_error() -> float:  # of the forecasts from 10 % of the run on, over 6 runs
        errors = []
        for seed in range(6):
            rows = rows_for(seed)
            peak = max(b for _, b in rows)
            f = Forecaster(40 * GIB, 40000)
            forecasts = [f.update(s, b) for s, b in rows]
            assert f.warn_step is None
            errors += [abs(fc.predicted_peak_bytes - peak) / peak for fc in forecasts[40:]]
        return sum(errors) / len(errors)

    assert mean_error() < 0.025
    for module in (residuals_mod, regime_mod, reach_mod, trend_mod):  # every user of lag1
        monkeypatch.setattr(module, "lag1", lambda r: 0.0)  # as if the wander were independent noise
    assert mean_error() > 0.025


def test_noisy_linear_growth_warns_after_a_tenth_of_the_way_with_default_reach():
    rows = linear(1000)  # crosses 10 GiB at step 600
    # the reach grows with the evidence (evidence_per_span), up to 20 spans: by 0.1 N
    d = decide(rows, 10 * GIB, horizon=999)
    assert d.warn_step <= 0.1 * 600
    # the rule before it: trusted to 10x the span, so never before 0.1 N, but soon after
    old = ForecasterOptions(max_extrapolation=10, evidence_per_span=0.0, autocorrelated_bounds=False)
    assert 0.1 * 600 < decide(rows, 10 * GIB, horizon=999, options=old).warn_step <= 0.13 * 600


def test_short_series_give_no_decision():
    d = decide([(0, 1 * GIB), (1, 2 * GIB), (2, 3 * GIB), (3, 4 * GIB), (4, 5 * GIB)], 8 * GIB, horizon=100)
    assert d.warn_step is None and not d.will_exceed and d.next_partition is None


def test_the_warning_is_confirmed_by_statsmodels(monkeypatch):
    rows = linear(300)
    calls = []

    def refuse(x, y, x0, confidence=0.99):
        calls.append(x0)
        return 0.0, -math.inf, math.inf

    monkeypatch.setattr(certainty_mod, "statsmodels_bounds", refuse)
    assert decide(rows, 10 * GIB, horizon=999).warn_step is None
    assert calls  # the closed form alone would have warned
    monkeypatch.undo()
    assert decide(rows, 10 * GIB, horizon=999).warn_step is not None


def test_running_peak_of_noise_gives_no_certainty():
    # LoRA training (make_series.py's model, another seed): the running peak of heavy-tailed
    # noise rises early in clean steps; certainty from it warned at step 11 before
    ms = _make_series_module()
    rows = ms._lora_training(ms.QWEN2_7B, steps=1000, batch=4, max_seq=2048, seed=206)
    capacity = 1.1 * max(b for _, b in rows)
    assert decide(rows, capacity, horizon=999).warn_step is None


@pytest.mark.parametrize("seed", [101, 102, 103])
def test_continuous_batching_plateau_never_warns(seed):
    ms = _make_series_module()
    rows = ms._serving(ms.LLAMA3_8B, steps=40000, sample_every=100, slots=24, seed=seed)
    assert decide(rows, 40 * GIB, horizon=40000).warn_step is None


def test_prefix_sums_give_the_least_squares_residuals_of_any_run():
    import numpy as np

    from predictor.regime import PrefixSums
    from predictor.linfit import fit_line

    rng = np.random.default_rng(3)
    x = np.cumsum(rng.random(200) + 0.1)
    y = 5e9 + 1e6 * x + rng.normal(0, 1e8, 200)
    sums = PrefixSums(x, y)
    ends = np.arange(1, 120)
    expected = [fit_line(x[:k], y[:k]).s ** 2 * (k - 2) if k > 2 else 0.0 for k in ends]
    assert np.allclose(sums.rss(0, ends), expected, rtol=1e-6)
    assert sums.rss_one(30, 200) == pytest.approx(fit_line(x[30:], y[30:]).s ** 2 * 168, rel=1e-9)
    assert np.allclose(sums.residuals(30, 200), y[30:] - [fit_line(x[30:], y[30:]).predict(v) for v in x[30:]])


# --------------------------------------------------------------------------- deceleration test
def test_curvature_t_statistic_matches_statsmodels():
    import numpy as np
    from statsmodels.regression.linear_model import OLS

    from predictor.residuals import curvature

    rng = np.random.default_rng(5)
    for n, bend in ((6, -2e3), (12, 0.0), (80, -1e3), (400, 5e2)):
        x = np.sort(rng.uniform(0, 1000, n)) + 1e4
        y = 2e10 + 3e6 * x + bend * (x - 1e4) ** 2 + rng.normal(0, 5e7, n)
        xc = x - x.mean()
        expected = OLS(y, np.column_stack([np.ones(n), xc, xc * xc])).fit().tvalues[2]
        t, r1 = curvature(x, y, 0.0)
        assert t == pytest.approx(expected, rel=1e-6)
        assert 0.0 <= r1 <= 0.95
    # the residual spread is floored (measurement resolution): an exact parabola's bend is
    # measured against the floor, not against rounding errors
    x = np.arange(10.0)
    q = (x - 4.5) ** 2
    q -= q.mean()
    t, _ = curvature(x, 100.0 - (x - 4.5) ** 2, floor=10.0)
    assert t == pytest.approx(-math.sqrt(float(q @ q)) / 10.0, rel=1e-9)


def test_significant_deceleration_gives_no_extrapolated_certainty():
    # continuous batching (make_series.py's model, 32 slots, seed 102) against 40 GiB: at step
    # 1000 the KV cache's fill is significantly concave; the line through it, trusted to 10x
    # its span, would call the job certain to exceed 40 GiB (it levels off near 21 GiB)
    ms = _make_series_module()
    rows = ms._serving(ms.LLAMA3_8B, steps=40000, sample_every=100, slots=32, seed=102)
    assert max(b for _, b in rows) < 40 * GIB
    # (the evidence rule alone also removes it: the rules before it, without the test)
    before = dict(max_extrapolation=10, evidence_per_span=0.0, autocorrelated_bounds=False)
    plain = decide(rows, 40 * GIB, horizon=40000, options=ForecasterOptions(deceleration_test=False, **before))
    assert plain.warn_step == 1000  # the false alarm the test removes
    assert decide(rows, 40 * GIB, horizon=40000, options=ForecasterOptions(**before)).warn_step is None
    assert decide(rows, 40 * GIB, horizon=40000).warn_step is None
    f = Forecaster(40 * GIB, 40000, options=ForecasterOptions(**before))
    for step, value in rows:
        fc = f.update(step, value)
        if step == 1000:
            break
    assert not fc.will_exceed and "decelerating" in fc.reason


@pytest.mark.parametrize("seed", range(4))
def test_deceleration_test_leaves_linear_growth_alone(seed):
    # straight lines (noisy, or an allocator staircase behind a prefill spike) are not read as
    # decelerating: their warnings come at the same step with the test as without it
    off = ForecasterOptions(deceleration_test=False)
    rows = linear(1000, seed=seed)
    d = decide(rows, 10 * GIB, horizon=999)
    assert d.warn_step is not None and d.warn_step <= 0.11 * 600
    assert d.warn_step == decide(rows, 10 * GIB, horizon=999, options=off).warn_step
    rows = decode_like(seed=seed)
    horizon = rows[-1][0]
    d = decide(rows, 20 * GIB, horizon=horizon)
    assert d.warn_step is not None
    assert d.warn_step == decide(rows, 20 * GIB, horizon=horizon, options=off).warn_step


# --- warm-ups, staircases and oscillations that end by themselves ------------------------

def _warns(rows, capacity, horizon, **opts):
    from predictor.decision import decide
    from predictor.forecast import ForecasterOptions

    return decide(rows, capacity, horizon, options=ForecasterOptions(**opts)).warn_step


def test_warmup_trap_is_not_warned():
    GIB = 1 << 30
    rows = [(i, (0.2 + 0.7 * min(i, 10)) * GIB) for i in range(300)]
    assert _warns(rows, 10 * GIB, 299) is None
    # the rules are what holds it: without them the ramp is extrapolated
    assert _warns(rows, 10 * GIB, 299, warmup_rule=False, evidence_per_span=0.0) is not None


def test_growth_after_a_warmup_still_warns_early():
    GIB = 1 << 30
    import random

    rng = random.Random(7)
    rows = [(i, (8 * min(i, 10) / 10 + 0.01 * max(0, i - 10)) * GIB * (1 + rng.gauss(0, 0.01))) for i in range(1000)]
    crossing = next(s for s, b in rows if b > 12 * GIB)
    warn = _warns(rows, 12 * GIB, 999)
    assert warn is not None and warn <= 0.25 * crossing
