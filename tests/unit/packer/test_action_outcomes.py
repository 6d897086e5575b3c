"""The actions' modes and the outcome rules that judge each action."""
from __future__ import annotations

import pytest

from packer.action_modes import action_mode, check_action_modes
from packer.action_outcomes import judge_growth, judge_head_start, judge_memory_run, judge_recovery, ran_out
from packer.config import ConfigError

GIB = 1024**3


def test_an_action_follows_the_helper_mode_unless_it_has_its_own():
    assert action_mode({}, "restart-memory", "observe").mode == "shadow"
    assert action_mode({}, "restart-memory", "advise").mode == "shadow"
    assert action_mode({}, "restart-memory", "enforce").acts
    own = action_mode({"restart-memory": "off"}, "restart-memory", "enforce")
    assert own.mode == "off" and own.label == "off"
    assert action_mode({"restart-memory": "enforce"}, "restart-memory", "observe").acts
    with pytest.raises(ConfigError, match="not an action"):
        check_action_modes({"restart-gpu": "shadow"})
    with pytest.raises(ConfigError, match="off, shadow, enforce"):
        check_action_modes({"restart-memory": "observe"})


def test_memory_outcome_over_the_share_oom_or_below():
    cap = 10 * GIB
    assert judge_memory_run(cap, 11 * GIB, None).outcome == "right"  # still running, already over
    assert judge_memory_run(cap, 8 * GIB, None) is None  # still running below: not known yet
    assert judge_memory_run(cap, 9.8 * GIB, "FAILED").outcome == "right"  # refused at the edge
    assert judge_memory_run(cap, 6 * GIB, "OUT_OF_MEMORY").outcome == "right"
    wrong = judge_memory_run(cap, 7.2 * GIB, "COMPLETED")
    assert wrong.outcome == "wrong" and "below its share of 10.0GiB" in wrong.detail
    assert judge_memory_run(cap, 5 * GIB, "FAILED").outcome == "wrong"  # failed for another reason
    assert not ran_out(9 * GIB, cap, "COMPLETED") and ran_out(10.5 * GIB, cap, "COMPLETED")


def test_contention_outcome_is_the_neighbour_speed_after_the_newcomer_left():
    assert judge_recovery([(1, 20.0, [19.0])], 0.10, 2) is None  # one sample: wait
    assert judge_recovery([(1, 20.0, [19.0, 18.6])], 0.10, 2).outcome == "right"
    not_back = judge_recovery([(1, 20.0, [15.0, 15.2])], 0.10, 2)
    assert not_back.outcome == "wrong" and "job 1 15.1/s (before 20/s)" in not_back.detail
    assert judge_recovery([], 0.10, 2).outcome == "unknown"
    # two hurt jobs: one came back, so the newcomer was a cause
    assert judge_recovery([(1, 20.0, [15.0, 15.0]), (2, 10.0, [9.9, 10.1])], 0.10, 2).outcome == "right"


def test_growth_outcome_is_the_grown_run_against_its_old_share_and_the_evicted_jobs():
    old = 20 * GIB
    assert judge_growth(old, 15 * GIB, None, [(9, True)]) is None  # within its old share so far
    assert judge_growth(old, 21 * GIB, None, [(9, None)]) is None  # past it; job 9 still waits
    right = judge_growth(old, 21 * GIB, None, [(9, True)])
    assert right.outcome == "right" and "past its old share of 20.0GiB" in right.detail
    assert "9 started again" in right.detail
    assert judge_growth(old, 19.5 * GIB, "OUT_OF_MEMORY", []).outcome == "right"
    wrong = judge_growth(old, 12 * GIB, "COMPLETED", [(9, True), (8, True)])
    assert wrong.outcome == "wrong" and "2 job(s) evicted for nothing" in wrong.detail
    assert judge_growth(old, 25 * GIB, "COMPLETED", [(9, False)]).outcome == "unknown"
    cut = judge_growth(old, 12 * GIB, "CANCELLED", [(9, True)])  # cut short: it never showed
    assert cut.outcome == "unknown" and "before it showed" in cut.detail


def test_regroup_outcome_is_the_head_start_against_the_plans_time():
    at, expected = 1000.0, 1060.0
    assert judge_head_start(at, expected, 30, None, False, 1050, shadow=False) is None
    assert judge_head_start(at, expected, 30, 1080, False, 1085, shadow=False).outcome == "right"
    late = judge_head_start(at, expected, 30, 1095, False, 1100, shadow=False)
    assert late.outcome == "wrong" and "started at +95s" in late.detail and "+60s" in late.detail
    assert judge_head_start(at, expected, 30, None, False, 1091, shadow=False).outcome == "wrong"
    assert judge_head_start(at, expected, 30, None, True, 1020, shadow=False).outcome == "unknown"
    assert judge_head_start(at, expected, 30, 1010, False, 1012, shadow=True).outcome == "wrong"  # not needed
    assert judge_head_start(at, expected, 30, None, False, 1091, shadow=True).outcome == "right"
