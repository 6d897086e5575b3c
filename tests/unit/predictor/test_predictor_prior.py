"""The workload's earlier runs as the forecaster's prior (predictor.prior)."""
from __future__ import annotations

import pytest

from predictor.decision import decide
from predictor.forecast import Forecaster
from predictor.prior import HistoryPrior, PriorRun

GIB = 1 << 30


def ramp(n, start, rate, cap=None):
    """(steps, bytes) of start + rate * i GiB, held at `cap` GiB when given."""
    values = [(start + rate * i) if cap is None else min(cap, start + rate * i) for i in range(n)]
    return tuple(float(i) for i in range(n)), tuple(v * GIB for v in values)


def test_earlier_runs_that_went_past_the_share_warn_at_the_first_sample():
    steps, values = ramp(100, 1, 0.11)  # 1 -> 11.9 GiB
    prior = HistoryPrior([PriorRun(steps, values), PriorRun(*ramp(100, 1, 0.12))])
    f = Forecaster(10 * GIB, 99, prior=prior)
    fc = f.update(0, 1 * GIB)
    assert fc.warn and f.warn_step == 0
    assert fc.lower_bytes > 10 * GIB and fc.will_exceed  # the bound that decided is the one shown
    assert fc.crossing_step == pytest.approx(82, abs=1)  # the step by which both earlier runs crossed
    assert fc.next_partition is None and fc.upper_bytes >= 12.8 * GIB  # none of the default sizes given


def test_no_history_and_history_below_the_share_do_not_warn_early():
    steps, values = ramp(100, 1, 0.11)
    for prior in (None, HistoryPrior([]), HistoryPrior([PriorRun(*ramp(100, 1, 0.08))])):  # the last peaks at 8.9 GiB
        f = Forecaster(10 * GIB, 99, prior=prior)
        assert not any(f.update(s, v).warn for s, v in zip(steps[:5], values[:5]))


def test_one_earlier_run_below_the_share_keeps_the_warning_back():
    """Every earlier run must have gone past: one that did not is evidence the run may not."""
    prior = HistoryPrior([PriorRun(*ramp(100, 1, 0.11)), PriorRun(*ramp(100, 1, 0.05))])
    f = Forecaster(10 * GIB, 99, prior=prior)
    assert not f.update(0, 1 * GIB).warn


def test_a_run_rising_above_its_earlier_runs_is_warned_when_that_carries_them_past_the_share():
    earlier = PriorRun(*ramp(200, 2, 0.05, cap=8))  # 2 -> 8 GiB by step 120, then flat
    f = Forecaster(10 * GIB, 199, prior=HistoryPrior([earlier]))
    warned = None
    for i in range(200):
        fc = f.update(i, (2 + 0.05 * i + (0.0 if i < 40 else 3.0)) * GIB)  # 3 GiB above it from step 40
        if fc.warn:
            warned = i
            break
    assert warned == 41  # the level it holds (two samples) is above the earlier run: 8 + 3 > 10
    own = Forecaster(10 * GIB, 199)  # without history its own trend warns at step 18 (a false alarm
    assert next(i for i in range(200) if own.update(i, (2 + 0.05 * i) * GIB).warn) < 40  # had it stayed)


def test_a_load_taken_earlier_within_the_earlier_runs_sampling_gap_is_no_rise():
    """Seen live (a JAX-like job, 6 GiB loaded at once, on a 9.75 GiB share): its earlier run
    was sampled at 0.25 s (nothing yet) and 1.91 s (6 GiB); this run showed its 6 GiB at
    0.81 s. Read at 0.81 s the earlier run had 2 GiB (interpolated), and a lift of 4 GiB
    forecast 10 GiB: a restart the run did not need (it ended at 6 GiB)."""
    share = 9.75 * GIB
    earlier = PriorRun((0.25, 1.91, 2.93), (0.0, 6 * GIB, 8 * GIB))
    f = Forecaster(share, 3600, prior=HistoryPrior([earlier]))
    fc = f.update(0.81, 6 * GIB)
    assert not fc.warn and fc.upper_bytes == 8 * GIB  # what the earlier run reached, no lift
    # above what the earlier run reached within that gap is still a rise: its 8 GiB lifted by 2
    f = Forecaster(share, 3600, prior=HistoryPrior([earlier]))
    assert f.update(0.81, 8 * GIB).lower_bytes == 10 * GIB > share


def test_a_run_above_its_earlier_runs_but_under_the_share_is_not_warned():
    earlier = PriorRun(*ramp(200, 2, 0.05, cap=6))
    f = Forecaster(10 * GIB, 199, prior=HistoryPrior([earlier]))
    assert not any(f.update(i, min(8, 3 + 0.05 * i) * GIB).warn for i in range(200))  # 1..2 GiB above, peak 8
    own = Forecaster(10 * GIB, 199)  # the trend alone extrapolates the ramp past 10 GiB
    assert any(own.update(i, min(8, 3 + 0.05 * i) * GIB).warn for i in range(200))


def test_alignment_by_progress_maps_a_slower_run_onto_its_earlier_run():
    earlier = PriorRun(*ramp(100, 1, 0.1, cap=6))  # flat at 6 GiB from step 50 of 100
    prior = HistoryPrior([earlier], align="progress")
    # this run takes twice as long (horizon 200): at step 100 it is half way, where the earlier
    # run was at 6 GiB; holding 6 GiB there is no rise above it
    view = prior.view(100, 6 * GIB, 1, 10 * GIB, 200)
    assert view.lower == pytest.approx(6 * GIB, rel=0.01) and view.crossing is None
    by_step = HistoryPrior([earlier]).view(100, 6 * GIB, 1, 10 * GIB, 200)  # past the earlier run's end
    assert by_step.lower == pytest.approx(6 * GIB)
    early = prior.view(20, 3 * GIB, 1, 10 * GIB, 200)  # 10 % in; the earlier run was at 2 GiB there
    assert early.lower == pytest.approx(7 * GIB)  # its remaining peak 6, lifted by 1


def test_an_earlier_run_that_ran_out_in_a_share_is_above_it_whatever_its_curve():
    capped = PriorRun(*ramp(50, 1, 0.2, cap=9.9), exceeded=10 * GIB)  # it died at its 10 GiB limit
    f = Forecaster(10 * GIB, 99, prior=HistoryPrior([capped]))
    fc = f.update(0, 1 * GIB)
    assert fc.warn and fc.crossing_step == 49  # it crossed where its curve ends
    assert not Forecaster(20 * GIB, 99, prior=HistoryPrior([capped])).update(0, 1 * GIB).warn


@pytest.mark.parametrize(
    "steps, values, exceeded, message",
    [
        ((), (), None, "needs samples"),
        ((0.0, 1.0), (1.0, float("nan")), None, "finite"),
        ((0.0, 0.0), (1.0, 2.0), None, "strictly increase"),
        ((0.0, 1.0), (1.0, -2.0), None, "negative"),
        ((0.0, 1.0), (1.0, 2.0), float("inf"), "finite number above 0"),
    ],
)
def test_bad_earlier_runs_are_refused(steps, values, exceeded, message):
    with pytest.raises(ValueError, match=message):
        PriorRun(steps, values, exceeded=exceeded)


def test_bad_alignment_is_refused():
    with pytest.raises(ValueError, match="align"):
        HistoryPrior([], align="time")
    with pytest.raises(ValueError, match="more than one sample"):
        HistoryPrior([PriorRun((0.0,), (1.0,))], align="progress")


def test_decide_takes_a_prior():
    steps, values = ramp(60, 1, 0.1)  # this run only reaches 6.9 GiB: its own trend is far from 10
    d = decide(list(zip(steps, values)), 10 * GIB, 99, prior=HistoryPrior([PriorRun(*ramp(100, 1, 0.11))]))
    assert d.warn_step == 0 and d.will_exceed and d.exceed_text == "yes"
    assert decide(list(zip(steps, values)), 10 * GIB, 99).warn_step is None


def test_cli_run_with_priors_and_bench_with_a_prior_per_series(tmp_path):
    import json

    from click.testing import CliRunner

    from predictor.series import write_series
    from slurm_plugin.cli.predict_cmd import predict

    steps, values = ramp(60, 1, 0.1)  # this run reaches 6.9 GiB; its earlier runs went to 11.9
    write_series(tmp_path / "now.csv", zip(steps, values))
    (tmp_path / "priors").mkdir()
    write_series(tmp_path / "priors" / "run1.csv", zip(*ramp(100, 1, 0.11)))
    write_series(tmp_path / "priors" / "run2.csv", zip(*ramp(100, 1, 0.12)))
    args = ["run", str(tmp_path / "now.csv"), "--capacity-gib", "10", "--horizon", "99", "--json"]
    plain = json.loads(CliRunner().invoke(predict, args).output)
    r = CliRunner().invoke(predict, [*args, "--prior", str(tmp_path / "priors" / "run1.csv"),
                                     "--prior", str(tmp_path / "priors" / "run2.csv")])
    assert r.exit_code == 0, r.output
    assert plain["warn_step"] is None and json.loads(r.output)["warn_step"] == 0
    r = CliRunner().invoke(predict, [*args, "--prior", str(tmp_path / "nope.csv")])
    assert r.exit_code == 1 and "nope.csv: no such file" in r.output

    (tmp_path / "now.json").write_text(json.dumps({"capacity_gib": 10, "horizon": 99,
                                                   "prior": ["priors/run1.csv", "priors/run2.csv"]}))
    d = json.loads(CliRunner().invoke(predict, ["bench", str(tmp_path), "--json"]).output)
    (row,) = d["series"]
    assert row["prior_runs"] == 2 and row["warn_step"] == 0 and row["false_alarm"]  # it never crossed itself
    d = json.loads(CliRunner().invoke(predict, ["bench", str(tmp_path), "--json", "--no-prior"]).output)
    assert d["series"][0]["prior_runs"] == 0 and d["series"][0]["warn_step"] is None
    (tmp_path / "now.json").write_text(json.dumps({"capacity_gib": 10, "prior": "priors/run1.csv"}))
    r = CliRunner().invoke(predict, ["bench", str(tmp_path)])
    assert r.exit_code == 1 and '"prior" must be a list' in r.output


def test_converging_within_the_forecasts_own_error_warns_a_noisy_line_earlier():
    """A line with 3 % noise: its forecast at the horizon moves by more than 5 % between
    updates by noise alone; counted within its own sampling error, it has converged."""
    import random

    from predictor.options import ForecasterOptions

    rng = random.Random(7)  # stress.py's lin_noise0.03_7 (its 1 % series drawn first)
    for noise in (0.01, 0.03):
        rows = [(i, 4 * GIB + 0.01 * GIB * i + rng.gauss(0, noise * 4 * GIB)) for i in range(1000)]
    strict = decide(rows, 10 * GIB, 999)
    relaxed = decide(rows, 10 * GIB, 999, options=ForecasterOptions(converge_by_error=True))
    assert strict.warn_step > 60 and relaxed.warn_step <= 60  # 10 % of the way to the crossing at 600
