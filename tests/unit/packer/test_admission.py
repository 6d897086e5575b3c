"""The load-aware admission rule (packer.admission) against completion times worked out
event by event, and its place in SuiteRules."""
from __future__ import annotations

import math

import pytest

from packer.admission import AdmissionRule, PackCase, QueueView, ResidentWork, pack_gain
from packer.corunner import GpuLoad, Newcomer, RunningJob
from packer.rules import SuiteRules

G = 1 << 30


def _pair_completion_sum(ra: float, db: float, sa: float, sb: float) -> tuple[float, float]:
    """A (``ra`` s of work left) and B (``db`` s) on one GPU at speeds sa, sb until the first
    ends, then alone: (sum of their completion times from now, when the GPU is free)."""
    t_a, t_b = ra / sa, db / sb
    if t_b <= t_a:  # B ends first; A finishes its rest alone
        end_b, end_a = t_b, t_b + (ra - sa * t_b)
    else:
        end_a, end_b = t_a, t_a + (db - sb * t_a)
    return end_a + end_b, max(end_a, end_b)


@pytest.mark.parametrize("ra,db,sa,sb,wait,waiting,gpus", [
    (100, 50, 0.8, 0.5, 10, 4, 2), (30, 500, 0.7, 0.9, 25, 0, 8), (1000, 1000, 0.6, 0.6, 0, 40, 10)])
def test_gain_is_the_completion_times_saved(ra, db, sa, sb, wait, waiting, gpus):
    packed_sum, packed_free = _pair_completion_sum(ra, db, sa, sb)
    seq_sum = ra + (wait + db)  # A alone; B waits for a whole GPU, then alone
    # GPU-seconds the pack saves: A's GPU holds both jobs' work for packed_free instead of
    # ra (A) + db (B on a GPU of its own)
    saved = ra + db - packed_free
    expect = (seq_sum - packed_sum) + waiting / gpus * saved
    got = pack_gain(PackCase(db, sb, (ResidentWork(ra, sa),)), QueueView(waiting, gpus, wait))
    assert got == pytest.approx(expect)


def test_a_long_queue_packs_a_pair_that_adds_throughput_a_draining_one_does_not():
    case = PackCase(3600.0, 0.7, (ResidentWork(7200.0, 0.7),))  # 1.4 GPUs of work together
    rule = AdmissionRule()
    assert rule.pays(case, QueueView(waiting=300, gpus=100, wait_s=60.0))
    assert not rule.pays(case, QueueView(waiting=0, gpus=100, wait_s=60.0))
    # nothing waits but the newcomer would wait longer than the pair loses: pack
    assert rule.pays(case, QueueView(waiting=0, gpus=100, wait_s=4 * 3600.0))


def test_a_pair_below_one_gpu_of_work_never_pays_on_a_long_queue():
    case = PackCase(3600.0, 0.5, (ResidentWork(7200.0, 0.45),))
    rule = AdmissionRule(min_speed=0.4)
    assert not rule.pays(case, QueueView(waiting=10_000, gpus=100, wait_s=600.0))


def test_a_pair_that_cannot_run_together_never_pays():
    case = PackCase(3600.0, 0.0, (ResidentWork(7200.0, 0.9),))
    assert pack_gain(case, QueueView(5, 1, 1e9)) == -math.inf
    assert not AdmissionRule(min_speed=1e-9).pays(case, QueueView(5, 1, math.inf))


def test_fairness_is_a_separate_floor():
    case = PackCase(3600.0, 0.95, (ResidentWork(7200.0, 0.45),))  # 1.4 together, one job at 0.45
    q = QueueView(waiting=500, gpus=100, wait_s=60.0)
    assert pack_gain(case, q) > 0
    assert not AdmissionRule().pays(case, q)
    assert AdmissionRule(min_speed=0.4).pays(case, q)


@pytest.mark.parametrize("bad", [dict(waiting=-1, gpus=1, wait_s=0.0), dict(waiting=0, gpus=0, wait_s=0.0),
                                 dict(waiting=0, gpus=1, wait_s=-5.0), dict(waiting=0, gpus=1, wait_s=math.nan)])
def test_bad_queue_views_are_refused(bad):
    with pytest.raises(ValueError):
        QueueView(**bad)


def test_bad_cases_and_rules_are_refused():
    with pytest.raises(ValueError, match="speeds"):
        PackCase(1.0, 1.2, (ResidentWork(1.0, 0.5),))
    with pytest.raises(ValueError, match="at least one"):
        PackCase(1.0, 0.5, ())
    with pytest.raises(ValueError, match="min_speed"):
        AdmissionRule(min_speed=0.0)
    with pytest.raises(ValueError, match="admission"):
        SuiteRules(admission="greedy")


def _gpu():
    return GpuLoad("g0", 80 * G, (RunningJob("1", "a", 10 * G, 50.0),))


def test_suite_rules_floor_is_fairness_when_load_aware_and_the_slowdown_bound_otherwise():
    new = Newcomer("2", "b", 10 * G, 50.0)
    speeds = {("a", "b"): 0.7, ("b", "a"): 0.7}
    sp = lambda x, y: speeds[(x, y)]  # noqa: E731
    aware = SuiteRules(admission="load-aware")
    assert [r.gpu.gpu_id for r in aware.corunners(new, [_gpu()], pair_speed=sp)] == ["g0"]
    old = SuiteRules()
    assert old.corunners(new, [_gpu()], pair_speed=sp) == []
    assert aware.tolerated_loss == pytest.approx(0.5) and old.tolerated_loss == pytest.approx(0.10)
    # the admin's floor above the pair's speeds refuses it under the load-aware rule too
    assert aware.with_overrides(min_speed=0.8).corunners(new, [_gpu()], pair_speed=sp) == []
