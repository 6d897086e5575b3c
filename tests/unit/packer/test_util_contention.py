"""Contention from utilisation counters: a drop must pass the threshold and stand out of the noise."""
from __future__ import annotations

import random

import pytest

from packer.contention import Resident, find_contention
from packer.util_contention import CounterRule, utilisation_drop

RULE = CounterRule(threshold=0.10, z=4.0, window=20, min_before=5, min_after=5, settle_s=2.0)


def series(levels: list[tuple[float, int]], sd: float = 2.0, seed: int = 1, start: float = 0.0):
    """(at, util) once a second: `levels` is [(util, seconds), ...], Gaussian noise `sd`."""
    rng = random.Random(seed)
    out, t = [], start
    for level, seconds in levels:
        for _ in range(seconds):
            out.append((t, round(level + rng.gauss(0, sd))))
            t += 1.0
    return out


def test_a_clear_drop_is_measured_and_significant():
    drop = utilisation_drop(series([(70, 30), (48, 20)]), since=30.0, rule=RULE)
    assert drop is not None and drop.significant and drop.hurt(0.10)
    assert drop.before == pytest.approx(70, abs=2) and drop.after == pytest.approx(48, abs=2)
    assert drop.loss == pytest.approx(0.31, abs=0.04)


def test_a_drop_below_the_threshold_or_inside_the_noise_is_no_harm():
    small = utilisation_drop(series([(70, 30), (67, 20)]), since=30.0, rule=RULE)
    assert small is not None and not small.hurt(0.10)
    noisy = utilisation_drop(series([(50, 30), (44, 10)], sd=15.0, seed=3), since=30.0, rule=RULE)
    assert noisy is not None and not noisy.significant  # 12 % lower, but the job swings by 15 points


def test_stall_samples_do_not_fake_a_drop():
    samples = series([(70, 40)])
    samples[33] = (33.0, 5)  # a data-loader stall right after the newcomer came
    samples[35] = (35.0, 0)
    drop = utilisation_drop(samples, since=30.0, rule=RULE)
    assert drop is not None and not drop.hurt(0.10)


def test_too_few_samples_give_no_judgement_and_only_the_first_window_after_counts():
    assert utilisation_drop(series([(70, 3), (40, 20)]), since=3.0, rule=RULE) is None  # 3 before
    assert utilisation_drop(series([(70, 30), (40, 5)]), since=30.0, rule=RULE) is None  # 3 after settle
    late = series([(70, 30), (70, 25), (40, 20)])  # the drop comes 25 s after the newcomer
    drop = utilisation_drop(late, since=30.0, rule=RULE)
    assert drop is not None and not drop.hurt(0.10)


def test_a_senior_that_reports_nothing_is_judged_on_its_counters():
    util = tuple(series([(70, 30), (48, 10)]))
    residents = [Resident(1, -100.0, (), "aaaa", utilisation=util), Resident(2, 30.0, (), "bbbb")]
    verdict = find_contention(residents, 0.10, counters=RULE)
    assert verdict is not None and verdict.newcomer == 2
    (hurt,) = verdict.hurt
    assert hurt.job_id == 1 and hurt.signal == "utilisation"
    assert "GPU utilisation" in verdict.reason and "reports no progress" in verdict.reason


def test_reported_throughput_is_preferred_to_the_counters():
    util = tuple(series([(70, 30), (48, 10)]))
    steady = tuple((float(t), 20.0) for t in range(40))  # the job says it runs as fast as before
    residents = [Resident(1, -100.0, steady, "aaaa", utilisation=util), Resident(2, 30.0, (), "bbbb")]
    assert find_contention(residents, 0.10, counters=RULE) is None


def test_a_rule_that_cannot_judge_is_refused():
    with pytest.raises(ValueError):
        CounterRule(window=3, min_before=5)
