"""Pair speeds with their spread from each workload's counters alone (packer.pair_predictor),
as SuiteRules hands them to the live submit path and the replay."""
from __future__ import annotations

import pytest

from packer.pair_model import MIN_PAIRS, PRIOR_SD, AloneCounters
from packer.pair_predictor import TRIAL_Z, PairPredictor
from packer.rules import SuiteRules

HOT, COOL = AloneCounters(0.9, None, 10.0), AloneCounters(0.1, None, 10.0)


def _solo_and_pairs():
    """Ten workloads, hot and cool in turn; two hot ones run at 0.2 beside each other, any
    pair with a cool one at 0.95 (processor sharing would say 0.56 and 1.0)."""
    solo = {f"w{i}": HOT if i % 2 == 0 else COOL for i in range(10)}
    measured = {(a, b): 0.2 if solo[a] is HOT and solo[b] is HOT else 0.95
                for a in solo for b in solo if a != b}
    return solo, measured


def test_measured_pairs_are_as_measured_and_others_come_from_the_fitted_model():
    solo, measured = _solo_and_pairs()
    assert len(measured) >= MIN_PAIRS
    pred = SuiteRules().pair_predictor(solo | {"new": HOT, "cool": COOL}, measured)
    assert pred.predict("w0", "w2").mean == 0.2 and pred.predict("w0", "w2").sd == 0.0
    hot = pred.predict("new", "w0")  # never measured: the model learnt that hot pairs are slow
    assert hot.mean == pytest.approx(0.2, abs=0.1) and 0 < hot.sd < 0.1
    assert pred.trial_speed("new", "w0") < 0.5  # sure enough it is too slow: not tried
    assert pred.predict("new", "cool").mean == pytest.approx(0.95, abs=0.1)
    assert pred.predict("new", "unknown") is None and pred.trial_speed("unknown", "w0") is None
    assert not pred.model.memory_engine  # the history keeps no memory controller counter


def test_an_unmeasured_pair_is_judged_at_its_upper_bound_and_a_measured_one_as_measured():
    solo, measured = _solo_and_pairs()
    pred = PairPredictor.build(solo | {"new": HOT}, measured)
    p = pred.predict("new", "w0")
    assert pred.trial_speed("new", "w0") == pytest.approx(min(1.0, p.mean + TRIAL_Z * p.sd))
    assert pred.trial_speed("w0", "w2") == 0.2
    # nothing fitted yet: processor sharing with a wide spread, tried at its upper bound
    prior = PairPredictor.build({"a": HOT, "b": HOT}, {})
    assert prior.predict("a", "b").mean == pytest.approx(1 / 1.8) and prior.predict("a", "b").sd == PRIOR_SD
    assert prior.trial_speed("a", "b") == min(1.0, 1 / 1.8 + TRIAL_Z * PRIOR_SD) == 1.0  # tried
    assert PairPredictor.build({"a": HOT, "b": HOT}, {}, trial_z=0.0).trial_speed("a", "b") == pytest.approx(1 / 1.8)
    # the rules' own setting decides it
    assert SuiteRules(pair_trial_z=0.0).pair_predictor({"a": HOT, "b": HOT}, {}).trial_speed("a", "b") < 1.0


def test_a_newcomer_is_added_without_a_refit_and_bad_input_is_refused():
    solo, measured = _solo_and_pairs()
    pred = PairPredictor.build(solo, measured)
    assert pred.predict("new", "w0") is None
    more = pred.including("new", HOT, {("new", "w1"): 0.5})
    assert more.model is pred.model and more.predict("new", "w1").mean == 0.5
    assert more.predict("new", "w0").mean == pytest.approx(0.2, abs=0.1)
    assert pred.predict("new", "w0") is None  # the view's predictor is left as it was
    with pytest.raises(ValueError, match=r"measured speed .* must be in \[0, 1\]"):
        PairPredictor.build(solo, {("w0", "w1"): 1.3})
    with pytest.raises(ValueError, match="trial_z"):
        PairPredictor.build(solo, measured, trial_z=-1.0)


def test_the_memory_controller_is_used_only_when_every_workload_has_it():
    with_mem = {f"w{i}": AloneCounters(0.6 if i % 2 == 0 else 0.2, 0.5, 10.0) for i in range(6)}
    measured = {(a, b): 0.5 for a in with_mem for b in with_mem if a != b}
    assert PairPredictor.build(with_mem, measured).model.memory_engine
    mixed = with_mem | {"x": HOT}
    assert not PairPredictor.build(mixed, measured).model.memory_engine
    # a newcomer without it is not predicted by a model that uses it
    assert PairPredictor.build(with_mem, measured).including("x", HOT).predict("x", "w0") is None
