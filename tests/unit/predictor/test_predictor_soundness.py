"""Sound input and output: numbers checked with a clear error; a crossing step only
within the horizon; "will exceed" agrees with the bounds shown."""
from __future__ import annotations

import json
import math
import random

import pytest
from click.testing import CliRunner

from predictor.bench import bench_series, run_bench
from predictor.decision import decide
from predictor.forecast import Forecaster
from predictor.kvmodel import QWEN2_7B, DecodeScenario, decode_series
from predictor.series import Series, write_series
from slurm_plugin.cli.predict_cmd import predict

GIB = 1 << 30


@pytest.mark.parametrize("capacity", [math.inf, math.nan, 0.0, -1.0])
def test_forecaster_refuses_a_capacity_that_is_not_a_finite_positive_number(capacity):
    with pytest.raises(ValueError, match="capacity_bytes must be a finite number above 0"):
        Forecaster(capacity, 100)


@pytest.mark.parametrize("horizon", [math.inf, math.nan, 0.0, -5.0])
def test_forecaster_refuses_a_horizon_that_is_not_a_finite_positive_number(horizon):
    with pytest.raises(ValueError, match="horizon must be a finite number above 0"):
        Forecaster(GIB, horizon)


def test_partition_sizes_are_checked():
    with pytest.raises(ValueError, match="partition size must be a finite number above 0"):
        Forecaster(GIB, 100, partition_sizes=[10 * GIB, math.inf])


def test_decide_refuses_a_horizon_before_the_series_ends():
    rows = [(i, GIB) for i in range(10)]
    with pytest.raises(ValueError, match="horizon 5 is before the series' last step 9"):
        decide(rows, 2 * GIB, 5)
    assert decide(rows, 2 * GIB, 9).horizon == 9


@pytest.mark.parametrize(
    "args, message",
    [
        (["--capacity-gib", "inf"], "Invalid value for '--capacity-gib': must be a finite number above 0, got 'inf'"),
        (["--capacity-gib", "nan"], "Invalid value for '--capacity-gib': must be a finite number above 0, got 'nan'"),
        (["--capacity-gib", "0"], "must be a finite number above 0, got '0'"),
        (["--capacity-gib", "8", "--horizon", "-5"], "Invalid value for '--horizon': must be a finite number above 0"),
        (["--capacity-gib", "8", "--partition-gib", "inf"], "Invalid value for '--partition-gib'"),
    ],
)
def test_cli_refuses_bad_numbers_with_a_usage_error_not_a_traceback(tmp_path, args, message):
    f = tmp_path / "job.csv"
    write_series(f, [(i, GIB) for i in range(20)])
    for command in (["run", str(f)], ["--series", str(f)]):
        r = CliRunner().invoke(predict, [*command, *args])
        assert r.exit_code == 2 and message in r.output, r.output
        assert r.exception is None or isinstance(r.exception, SystemExit)


def test_bench_refuses_a_sidecar_capacity_that_is_not_finite(tmp_path):
    write_series(tmp_path / "a.csv", [(i, GIB) for i in range(20)])
    (tmp_path / "a.json").write_text('{"capacity_gib": Infinity}')
    with pytest.raises(ValueError, match="a.json: capacity_gib must be a finite number above 0"):
        run_bench(tmp_path)
    (tmp_path / "a.json").write_text(json.dumps({"capacity_gib": 8, "horizon": 3}))
    with pytest.raises(ValueError, match="a.csv: horizon 3 is before the series' last step 19"):
        run_bench(tmp_path)


def _flat_and_spike(seed: int):
    rng = random.Random(seed)
    flat = [(i, 6 * GIB * (1 + rng.gauss(0, 0.03))) for i in range(500)]
    spike = [(i, (9 if i < 3 else 6) * GIB * (1 + rng.gauss(0, 0.01))) for i in range(500)]
    return flat, spike


def test_a_crossing_step_beyond_the_horizon_is_never_reported():
    """A nearly flat line meets any capacity at some absurd step (1.19e8 against a horizon
    of 1000 in the issue): that is no forecast."""
    for seed in (1, 3, 7):
        for rows, capacity in zip(_flat_and_spike(seed), (7 * GIB, 10 * GIB)):
            f = Forecaster(capacity, 499)
            for step, value in rows:
                fc = f.update(step, value)
                assert fc.crossing_step is None or fc.crossing_step <= fc.horizon, (seed, step, fc.crossing_step)
            assert decide(rows, capacity, 499).crossing_step is None


def test_will_exceed_agrees_with_the_lower_bound_shown_at_every_step():
    """On a decode series crossing at 30 % of its run, the lower bound at the horizon used
    to be above the capacity for many steps while "will exceed" said no (the bound that
    decided was the one at the reach): the bound shown is now the one that decides."""
    sc = DecodeScenario(QWEN2_7B, batch=8, prompt_tokens=256, new_tokens=4096, seed=301)
    rows = decode_series(sc)
    capacity = next(b for s, b in rows if s >= 0.3 * sc.new_tokens) - 1
    f = Forecaster(capacity, sc.new_tokens)
    for step, value in rows[:400]:
        fc = f.update(step, value)
        assert fc.will_exceed == (fc.lower_bytes > fc.capacity_bytes), (step, fc.lower_bytes / capacity)
        assert fc.lower_bytes <= fc.predicted_peak_bytes <= fc.upper_bytes


def test_printed_verdict_agrees_with_the_printed_estimate_after_a_level_shift(tmp_path):
    """A level shift to just under the capacity: the upper bound is above the capacity, the
    estimate and the lower bound are not; the output says "not certain", not a bare "no"."""
    rng = random.Random(4)
    rows = [(i, min(9.99, (4 if i < 300 else 9.85) * (1 + rng.gauss(0, 0.005))) * GIB) for i in range(600)]
    f = tmp_path / "shift.csv"
    write_series(f, rows)
    d = decide(rows, 10 * GIB, 1200)
    assert not d.will_exceed and d.lower_bytes <= d.predicted_peak_bytes <= 10 * GIB < d.upper_bytes
    r = CliRunner().invoke(predict, ["run", str(f), "--capacity-gib", "10", "--horizon", "1200"])
    assert r.exit_code == 0, r.output
    assert "will exceed:     not certain (only the upper bound is above the capacity)" in r.output


def test_bench_series_checks_its_capacity():
    s = Series((0.0, 1.0, 2.0), (1.0, 2.0, 3.0), None, "x")
    with pytest.raises(ValueError, match="x: capacity must be a finite number above 0"):
        bench_series(s, math.nan)
