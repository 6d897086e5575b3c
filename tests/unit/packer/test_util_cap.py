"""The utilisation cap on a GPU's total (packer/util_cap.py) and the co-runner rule that uses it."""
from __future__ import annotations

import math

import pytest

from packer.config import PackerConfig
from packer.corunner import GpuLoad, Newcomer, RunningJob, choose_corunner, rank_corunners
from packer.rules import SuiteRules
from packer.util_cap import within_util_cap

G = 1 << 30


def busy(gid: str, *utils: float | None) -> GpuLoad:
    return GpuLoad(gid, 80 * G, tuple(RunningJob(f"{gid}-{i}", "w", 10 * G, u) for i, u in enumerate(utils)))


def test_the_sum_with_the_newcomer_is_capped_inclusively():
    assert within_util_cap(45.0, [50.0], 95.0)  # exactly 95 %
    assert not within_util_cap(45.1, [50.0], 95.0)
    assert within_util_cap(20.0, [30.0, 40.0], 95.0)
    assert not within_util_cap(30.0, [30.0, 40.0], 95.0)  # three jobs: 100 %


def test_zero_is_no_cap_and_unknown_utilisations_add_nothing():
    assert within_util_cap(99.0, [99.0], 0.0)
    assert within_util_cap(None, [90.0], 95.0)  # a job with no history: the memory cap and the watch judge it
    assert not within_util_cap(None, [60.0, 40.0], 95.0)  # what is measured already passes the cap


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_bad_utilisations_and_caps_are_refused(bad):
    with pytest.raises(ValueError):
        within_util_cap(bad, [10.0], 95.0)
    if not math.isinf(bad):
        with pytest.raises(ValueError):
            within_util_cap(10.0, [10.0], bad)


def test_the_corunner_rule_skips_a_gpu_over_the_cap_and_says_why():
    new = Newcomer("n", "x", 8 * G, util_pct=40.0)
    gpus = [busy("A", 60.0), busy("B", 50.0)]
    assert [r.gpu.gpu_id for r in rank_corunners(new, gpus, max_util_total=95.0)] == ["B"]
    assert len(rank_corunners(new, gpus)) == 2  # no cap: both
    none = choose_corunner(new, [busy("A", 60.0)], max_util_total=95.0)
    assert none.gpu_id is None and none.reason == "over-95%-util-cap"


def test_suite_rules_take_the_cap_from_the_packer_table():
    new = Newcomer("n", "x", 8 * G, util_pct=40.0)
    capped = SuiteRules(config=PackerConfig(max_gpu_util_pct=95.0), corunner_rule="lowest-util")
    assert capped.corunners(new, [busy("A", 60.0)]) == []
    shipped = SuiteRules(config=PackerConfig(), corunner_rule="lowest-util")
    assert len(shipped.corunners(new, [busy("A", 60.0)])) == 1  # the default: 0, no cap
