"""The nearest level with history sizes a job, with its level's headroom; a looser level that
guessed wrong often is passed over; the exact script's lower bound binds every level."""
import pytest

from packer.config import GIB, ConfigError, PackerConfig
from packer.decision import LOWER_BOUND_SOURCE, ClusterView, Estimate, decide, shards_needed
from packer.history_levels import LevelRecord, demoted, levels_in_use, nearest_level
from packer.request import Candidate

CFG = PackerConfig(mode="enforce", gpu_memory_gib=80, shares_per_gpu=8, gpu_model="",  # 10 GiB a share
                   loosest_history_level="command")
CAND = Candidate("tres_per_node", None, "22.05")


def est(gib, runs=2, util=30.0):
    return Estimate(int(gib * GIB), util, runs)


def test_the_exact_level_wins_when_it_has_a_measurement():
    choice = nearest_level([LevelRecord("exact", "e", est(5)), LevelRecord("variant", "v", est(30))], CFG)
    assert choice.level == "exact" and choice.estimate.peak_mem_bytes == 5 * GIB


def test_the_nearest_looser_level_with_history_sizes_the_job():
    records = [LevelRecord("exact", "e", None), LevelRecord("variant", "v", None), LevelRecord("command", "c", est(7))]
    choice = nearest_level(records, CFG)
    assert choice.level == "command" and choice.estimate.level == "command"
    records[1] = LevelRecord("variant", "v", est(6))
    assert nearest_level(records, CFG).level == "variant"


def test_the_loosest_level_setting_limits_the_search():
    records = [LevelRecord("variant", "v", None), LevelRecord("command", "c", est(7))]
    assert nearest_level(records, CFG.with_overrides(loosest_history_level="variant")).estimate is None
    assert levels_in_use(CFG.with_overrides(loosest_history_level="exact")) == ("exact",)
    assert PackerConfig().loosest_history_level == "variant"  # shipped: the command level is opt-in
    assert levels_in_use(PackerConfig()) == ("exact", "variant")
    with pytest.raises(ConfigError, match="loosest_history_level"):
        PackerConfig(loosest_history_level="fuzzy")


def test_an_exact_lower_bound_raises_a_looser_estimate():
    bound = Estimate(12 * GIB, None, 1, source=LOWER_BOUND_SOURCE, lower_bound_bytes=12 * GIB)
    choice = nearest_level([LevelRecord("exact", "e", bound), LevelRecord("variant", "v", est(6))], CFG)
    assert choice.level == "variant"
    assert choice.estimate.peak_mem_bytes == 12 * GIB and choice.estimate.lower_bound_bytes == 12 * GIB


def test_a_level_that_guesses_wrong_often_is_passed_over():
    assert not demoted(1, 0, 2) and demoted(2, 1, 2) and not demoted(2, 2, 2) and demoted(3, 2, 2)
    records = [LevelRecord("variant", "v", est(6), wrong=2, right=0), LevelRecord("command", "c", est(9))]
    choice = nearest_level(records, CFG)
    assert choice.level == "command" and choice.passed_over == (("variant", "demoted: 2 wrong, 0 right"),)
    records[1] = LevelRecord("command", "c", est(9), wrong=3, right=1)
    assert nearest_level(records, CFG).estimate is None  # no level left: the job is profiled
    # the exact level is never demoted (its wrong sizes are remembered instead)
    assert nearest_level([LevelRecord("exact", "e", est(5), wrong=9)], CFG).level == "exact"


def test_headroom_grows_with_the_looseness_of_the_match():
    assert CFG.headroom_for("exact") == 0.10
    assert CFG.headroom_for("variant") == 0.25 and CFG.headroom_for("command") == 0.50
    # never less than a nearer level's
    wide = CFG.with_overrides(headroom_fraction=0.4, variant_headroom_fraction=0.2, command_headroom_fraction=0.3)
    assert wide.headroom_for("variant") == 0.4 and wide.headroom_for("command") == 0.4
    peak = int(8.5 * GIB)  # 10 GiB shares: 8.5 + 0.85 fits one, + 2.1 or + 4.25 does not
    assert [shards_needed(peak, CFG, lv) for lv in ("exact", "variant", "command")] == [1, 2, 2]
    assert shards_needed(int(7.5 * GIB), CFG, "variant") == 1 and shards_needed(int(7.5 * GIB), CFG, "command") == 2


def test_the_decision_sizes_with_the_levels_headroom_and_says_which_level():
    from dataclasses import replace

    d = decide(CAND, replace(est(7.5), level="command"), ClusterView(0), CFG, "fp")
    assert d.verdict == "packed" and d.shards == 2
    assert "src=history(2) lvl=command fp=fp" in d.comment()
    assert "lvl=exact" in decide(CAND, est(7.5), ClusterView(0), CFG, "fp").comment()
    assert "lvl=" not in decide(CAND, None, ClusterView(0), CFG, "fp").comment()
