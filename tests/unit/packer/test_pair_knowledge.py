"""The pair feature model and observed-pairs bookkeeping the simulator and the helper share."""
from __future__ import annotations

import numpy as np
import pytest

from packer.pair_knowledge import FLOOR, MIN_FIT, JobTraits, ObservedPairs, PairKnowledge, pair_features, \
    sharing_label

G = 1 << 30


def test_sharing_label_from_utilisation():
    assert [sharing_label(u) for u in (10, 39.9, 40, 79, 80, 100)] == [0, 0, 1, 1, 2, 2]
    assert JobTraits.from_history(85.0, 8 * G).label == 2


def test_features_hold_processor_sharing_and_both_memories():
    x = pair_features(JobTraits(60, 8 * G, 1), JobTraits(80, 2 * G, 2))
    assert x[0] == 1.0 and x[1] == pytest.approx(0.6) and x[2] == pytest.approx(0.8)
    assert x[5] == pytest.approx(1 / 1.4)  # 140 % asked of one GPU
    assert x[6:] == [8.0, 2.0, 0.0, 1.0]


def test_observed_pairs_refit_when_they_grew_by_a_quarter():
    seen: ObservedPairs[str] = ObservedPairs()
    for i in range(MIN_FIT - 1):
        assert seen.add(f"a{i}", "b", 0.9)
    assert not seen.add("a0", "b", 0.1) and seen.seen[("a0", "b")] == 0.9  # the first measure stays
    assert not seen.refit_due()
    seen.add("x", "y", 0.5)
    assert seen.refit_due()
    seen.fitted()
    assert not seen.refit_due()
    for i in range(MIN_FIT // 4):
        seen.add(f"c{i}", "d", 0.7)
    assert seen.refit_due()


def test_speed_is_observed_else_processor_sharing_before_a_fit():
    traits = {"light": JobTraits(30, 4 * G, 0), "heavy": JobTraits(90, 20 * G, 2)}
    know = PairKnowledge(traits, {("light", "heavy"): 0.4})
    assert know.speed("light", "heavy") == 0.4 and know.known("light", "heavy")
    assert know.speed("heavy", "light") == pytest.approx(100 / 120)  # unseen: processor sharing
    assert know.speed("light", "light") == 1.0
    assert know.speed("light", "nobody") is None  # no history: no prediction
    assert know.weights is None


def test_fitted_model_learns_that_heavy_pairs_hurt_more_than_sharing_says():
    # observed: any pair with a jumbo job runs at 0.5, others at 0.95, whatever the utilisation
    rng = np.random.default_rng(3)
    traits = {f"j{i}": JobTraits.from_history(float(u), float(m) * G)
              for i, (u, m) in enumerate(zip(rng.uniform(10, 95, 30), rng.uniform(1, 30, 30)))}
    names = sorted(traits)
    observed = {(a, b): (0.5 if traits[a].label == 2 or traits[b].label == 2 else 0.95)
                for a in names[:12] for b in names[:12] if a != b}
    know = PairKnowledge(traits, observed)
    assert know.weights is not None
    light = [n for n in names[12:] if traits[n].util_pct < 30]
    jumbo = [n for n in names[12:] if traits[n].label == 2]
    assert light and jumbo
    bad = know.speed(light[0], jumbo[0])
    assert FLOOR <= bad < 0.75  # processor sharing alone would say >= 0.8 for these utilisations
    assert know.predicted(light[0], light[-1]) > 0.85
