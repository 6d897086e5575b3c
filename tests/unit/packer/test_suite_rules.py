"""packer.rules.SuiteRules: each decision is the existing rule's, with the object's settings."""
from __future__ import annotations

import pytest
from dataclasses import replace


from packer.config import GIB, PackerConfig
from packer.contention import Sharer, check_contention
from packer.corunner import GpuLoad, Newcomer, RunningJob, rank_corunners
from packer.decision import ClusterView, Estimate, decide
from packer.grow import GpuShares, Preemptor, Tenant, plan_growth
from packer.contention import Resident, find_contention
from packer.regroup_budget import MoveBudget
from packer.regroup_model import Cluster, GpuInfo, HeadJob, Holding, Movability, RunningJob as Moved, SignalSpec
from packer.regroup import plan_regroup
from packer.request import Candidate
from packer.rules import SuiteRules
from packer.util_contention import CounterRule
from predictor.restart import decide_restart
from slurm_plugin.helper.monitor_settings import MonitorSettings

CAND = Candidate(field="tres_per_node", gpu_type=None, dialect="23.11")


def series(t0, t1, value):
    return tuple((float(t), value) for t in range(t0, t1))


def test_the_helpers_default_settings_are_the_rules_defaults():
    # the one difference: the helper's submit path admits load-aware, as the replay
    assert MonitorSettings().rules(PackerConfig()) == SuiteRules(admission="load-aware")
    site = MonitorSettings(contention_threshold=0.3, restart_cost_s=5, oom_penalty_s=7, regroup_moves_per_hour=1,
                           grow_running_max_evictions=1, regroup_min_gain_ratio=2.0)
    r = site.rules(PackerConfig(max_util_pct=50.0))
    assert (r.contention_threshold, r.restart_cost_s, r.oom_penalty_s, r.regroup_moves_per_hour) == (0.3, 5, 7, 1)
    assert r.grow_thresholds() == replace(site.grow_settings(r.max_packed_shares), rungs=r.config.rungs)
    assert r.regroup_settings == site.regroup_settings() and r.counter_rule() == site.counter_rule()
    assert r.config.max_util_pct == 50.0


@pytest.mark.parametrize("idle", [0, 1])
def test_admit_is_decide_with_the_rules_config(idle):
    cfg = PackerConfig(max_util_pct=50.0)
    rules = SuiteRules(config=cfg)
    for est in (Estimate(6 * GIB, 30.0, 3), Estimate(6 * GIB, 80.0, 3), None):
        want = decide(CAND, est, ClusterView(idle), cfg, fingerprint="fp", remembered_shards=2)
        assert rules.admit(CAND, est, ClusterView(idle), fingerprint="fp", remembered_shards=2) == want
    assert rules.admit(CAND, Estimate(6 * GIB, 80.0, 3), ClusterView(0)).reason == "high-util"


def test_corunners_use_the_rule_and_the_contention_threshold_as_the_floor():
    new = Newcomer("n", "w-new", 10 * GIB, 30.0)
    gpus = [GpuLoad(f"g{i}", 80 * GIB, (RunningJob(f"j{i}", f"w{i}", (10 + i) * GIB, 20.0),)) for i in range(3)]
    speed = {"w0": 0.85, "w1": 0.95, "w2": 0.99}

    def pair(a, b):
        return speed.get(a if a != "w-new" else b, 1.0) if "w-new" in (a, b) else None

    rules = SuiteRules(corunner_rule="best-fit", contention_threshold=0.10)
    got = rules.corunners(new, gpus, avoid={("w-new", "w2")}, pair_speed=pair)
    want = rank_corunners(new, gpus, rule="best-fit", max_fraction=0.95, max_jobs_per_gpu=2,
                          avoid={("w-new", "w2")}, pair_speed=pair, min_corunner_speed=0.9)
    assert [r.gpu.gpu_id for r in got] == [r.gpu.gpu_id for r in want] == ["g1"]  # g0 too slow, g2 avoided
    loose = rules.with_overrides(contention_threshold=0.2).corunners(new, gpus, pair_speed=pair)
    assert [r.gpu.gpu_id for r in loose] == ["g2", "g1", "g0"]  # best-fit: the fullest first
    assert [r.gpu.gpu_id for r in rules.corunners(new, gpus)] == ["g2", "g1", "g0"]  # no prediction: no floor


def test_contention_is_find_contention_and_check_contention_with_the_rules_threshold():
    senior = Resident(1, 0.0, series(0, 10, 20.0) + series(10, 20, 16.0), "fpA")  # 20 % loss
    newcomer = Resident(2, 10.0, series(10, 20, 30.0), "fpB")
    strict, loose = SuiteRules(contention_threshold=0.1), SuiteRules(contention_threshold=0.3)
    assert strict.contention([senior, newcomer]) == find_contention(
        [senior, newcomer], 0.1, settle_s=2.0, min_before=2, min_after=2,
        counters=CounterRule(threshold=0.1, z=4.0, window=20, min_before=8, min_after=8, settle_s=2.0))
    assert strict.contention([senior, newcomer]).newcomer == 2
    assert loose.contention([senior, newcomer]) is None
    sharers = [Sharer(1, "a", 0.0, 1.0, 0.8), Sharer(2, "b", 5.0, 1.0, 0.9)]
    assert strict.contention_now(sharers) == check_contention(sharers, 0.1)
    assert strict.contention_now(sharers).newcomer == 2 and loose.contention_now(sharers) is None


def test_restart_prices_with_the_rules_costs():
    kw = dict(now_s=100_000.0, checkpoint_s=0.0, crossing_s=100_005.0, end_s=None,
              predicted_peak_bytes=11 * GIB, capacity_bytes=10 * GIB, p_oom=0.99)
    free = SuiteRules(restart_cost_s=0.0, oom_penalty_s=0.0)
    assert free.restart(**kw) == decide_restart(warn=True, restart_cost_s=0.0, oom_penalty_s=0.0, **kw)
    assert not free.restart(**kw).restart  # a long run near a probable OOM: kept
    assert SuiteRules().restart(**kw).restart  # a failure priced at 30 min: restarted


def test_grow_is_plan_growth_with_the_packed_cap_of_the_config():
    gpu = GpuShares("n:0", 8, (Tenant(1, 0.0, 2), Tenant(2, 50.0, 3), Tenant(3, 60.0, 3)))
    p = Preemptor(1, "n:0", True, 4, 5, since=0.0, waiting_since=100.0, held_shares=2)
    rules = SuiteRules(PackerConfig(shares_per_gpu=8, gpu_model=""))  # 8 shares, any count (no MIG geometry)
    assert rules.grow([gpu], [p], 100.0) == plan_growth([gpu], [p], rules.grow_thresholds(), 100.0)
    assert rules.grow_thresholds().max_packed_shares == 7  # floor(8 x 0.95)
    (d,) = rules.grow([gpu], [p], 100.0)
    assert d.acted and [e.job_id for e in d.evictions] == [3]


def test_regroup_is_plan_regroup_with_the_rules_thresholds_and_budget():
    sig = SignalSpec("USR1", 60, batch_only=True)
    gpus = tuple(GpuInfo("n1", i, shares=8) for i in range(2))
    jobs = (Moved(10, (Holding("n1", 0, shares=2),), 0.0, 7200.0, Movability(requeue=True, signal=sig)),
            Moved(11, (Holding("n1", 1, shares=2),), 0.0, 7200.0, Movability(requeue=True, signal=sig)))
    cluster = Cluster(gpus, jobs, max_packed_shares=7)
    head = HeadJob(99, gpus=1, submitted_at=0.0, expected_start=7200.0)
    rules = SuiteRules()
    got = rules.regroup(cluster, head, 100.0, rules.move_budget(lambda: 100.0))
    want = plan_regroup(cluster, head, 100.0, rules.regroup_settings, MoveBudget(2, 6, clock=lambda: 100.0),
                        max_moves=2)
    assert got == want and got.chosen is not None
    strict = rules.with_overrides(regroup_moves_per_plan=0)
    assert strict.regroup(cluster, head, 100.0, strict.move_budget(lambda: 100.0)).chosen is None


def test_bad_settings_are_refused():
    for bad in (dict(corunner_rule="nope"), dict(max_jobs_per_gpu=0), dict(contention_threshold=0.0),
                dict(restart_cost_s=-1.0), dict(regroup_moves_per_hour=-1)):
        with pytest.raises(ValueError):
            SuiteRules(**bad)
