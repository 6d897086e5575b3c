"""The pair model from counters alone, with its uncertainty (packer.pair_model), the expected
gain that weighs an uncertain pair (packer.admission.expected_gain), and the left-out-family
validation (simulator.pair_validation)."""
from __future__ import annotations

import random
import pytest

from packer.admission import PackCase, QueueView, ResidentWork, expected_gain, pack_gain
from packer.pair_model import MIN_PAIRS, PRIOR_SD, AloneCounters, PairModel, Prediction
from packer.rules import SuiteRules


def job(busy, mem_busy=0.3, mem=10.0):
    return AloneCounters(busy, mem_busy, mem)


def test_before_enough_pairs_it_is_processor_sharing_with_a_wide_spread():
    m = PairModel.fit([(job(0.6), job(0.6), 0.8)] * (MIN_PAIRS - 1))
    p = m.predict(job(0.7), job(0.6))
    assert p.mean == pytest.approx(1 / 1.3) and p.sd == PRIOR_SD


def test_a_fit_learns_the_speeds_and_is_surer_where_it_has_seen_more():
    rng = random.Random(0)
    truth = lambda a, b: 1.0 - 0.5 * a.busy * b.busy  # noqa: E731
    jobs = [job(rng.uniform(0.1, 0.9), rng.uniform(0.1, 0.9), rng.uniform(1, 40)) for _ in range(30)]
    pairs = [(a, b, truth(a, b) + rng.gauss(0, 0.02)) for a in jobs for b in jobs]
    model = PairModel.fit(pairs)
    a, b = job(0.5), job(0.8)
    p = model.predict(a, b)
    assert p.mean == pytest.approx(truth(a, b), abs=0.03)
    assert 0.015 < p.sd < 0.05  # about the noise
    few = PairModel.fit(pairs[:MIN_PAIRS])
    assert few.predict(a, b).sd > p.sd


def test_expected_gain_is_the_gain_without_spread_and_tries_an_unsure_pair_that_pays_on_average():
    q = QueueView(0, 4, 3000.0)
    sure = expected_gain(3600, Prediction(0.8, 0.0), [(7200, Prediction(0.8, 0.0))], q)
    assert sure == pytest.approx(pack_gain(PackCase(3600, 0.8, (ResidentWork(7200, 0.8),)), q))
    rules = SuiteRules(admission="load-aware")
    unsure = Prediction(0.85, 0.3)  # its pessimistic point (0.33) is under the 0.5 floor
    long_wait = QueueView(0, 4, 20000.0)
    assert rules.pack_pays_uncertain(3600, unsure, [(7200, unsure)], long_wait)
    assert not rules.pack_pays_uncertain(3600, unsure, [(7200, unsure)], QueueView(0, 4, 600.0))
    assert not rules.pack_pays_uncertain(3600, Prediction(0.45, 0.01), [(7200, unsure)], long_wait)  # unfair


def test_left_out_families_are_predicted_from_counters_with_an_honest_spread():
    from simulator.pair_validation import leave_families_out, load
    from simulator.workload import default_data_dir

    data = default_data_dir()
    if data is None:
        pytest.skip("needs shared/data/traces or $GPUPACK_DATA_DIR (CI has it)")
    profiles, pairs = load(data, None)
    got = leave_families_out(profiles, pairs)
    bayes = got["counters-bayes"]
    assert bayes["mae"] < got["processor-sharing"]["mae"]
    assert 0.8 < bayes["coverage_95"] <= 1.0
