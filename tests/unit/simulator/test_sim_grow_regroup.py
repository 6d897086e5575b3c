"""The replay's grow by preemption (packer.grow) and regrouping (packer.regroup)
wired into the simulator, on hand-made traces where each must happen, and where it must not."""
from __future__ import annotations

import pytest

from simulator import PairTable, SimConfig, SimJobSpec, WorkloadProfile, simulate, summary
from simulator.regrouping import declares_movable

G = 1 << 30

PROFILES = [
    WorkloadProfile(0, "small/r", 5 * G, 20.0, 100.0, 0),
    WorkloadProfile(1, "grow/a", 4 * G, 20.0, 100.0, 0),
    WorkloadProfile(2, "big/b", 50 * G, 20.0, 100.0, 0),
]
PAIRS = PairTable(PROFILES, {(a, b): 0.95 for a in range(3) for b in range(3)})


def run(specs, gpus=1, **kw):
    cfg = SimConfig(policy="colocate", gpus=gpus, gpu_model="H100-80GB", predictor=True,
                    known_history=True, pair_knowledge="oracle", **kw)
    return simulate(cfg, specs, PROFILES, PAIRS)


def by_id(res):
    return {j.id: j for j in res.jobs}


# ------------------------------------------------------------------ grow by preemption
# R runs alone; A (4 GiB growing to 45 GiB) packs beside it with 1 share; R ends; B (50 GiB,
# 6 shares) packs beside A. The predictor warns A will need 5 shares: 1 held + 1 free is
# not enough, B is younger and may be requeued: B is evicted, A restarts with 5 shares.
YOUNGER = [SimJobSpec(0, 0.0, 100.0, 1, 0, 5 * G, 5 * G),
           SimJobSpec(1, 10.0, 20000.0, 1, 1, 4 * G, 45 * G),
           SimJobSpec(2, 150.0, 5000.0, 1, 2, 50 * G, 50 * G)]
# B is there first (older): A may not evict it and goes through the queue as before.
OLDER = [SimJobSpec(2, 0.0, 5000.0, 1, 2, 50 * G, 50 * G),
         SimJobSpec(1, 10.0, 20000.0, 1, 1, 4 * G, 45 * G)]


def test_a_growing_packed_job_evicts_its_younger_neighbour_and_restarts_in_place():
    res = run(YOUNGER, grow_preempt=True)
    s = summary(res)
    jobs = by_id(res)
    a, b = jobs[1], jobs[2]
    assert s["grow_preemptions"] == 1 and s["grow_restarts_in_place"] == 1
    assert b.preemptions == 1 and b.lost_work > 0  # requeued, its attempt lost
    assert s["grow_lost_work_s"] == pytest.approx(b.lost_work, abs=0.1)
    assert a.pred_restarts == 1 and a.oom_restarts == 0
    # A restarted at once on the same GPU with the larger share, never waiting in the queue;
    # B came back only once A had ended (no room beside 5 shares for its 6)
    assert a.shards == 5
    assert b.end == pytest.approx(a.end + b.duration, rel=1e-6)
    assert s["jobs_unfinished"] == 0


def test_without_the_switch_the_grower_goes_through_the_queue():
    res = run(YOUNGER, grow_preempt=False)
    s = summary(res)
    jobs = by_id(res)
    assert s["grow_preemptions"] == 0 and s["grow_restarts_in_place"] == 0
    assert jobs[2].preemptions == 0 and jobs[2].lost_work == 0
    assert jobs[1].pred_restarts == 1
    # A waited for B to end before it could come back bigger
    assert jobs[1].end > jobs[2].end + jobs[1].duration * 0.9


def test_an_older_neighbour_is_never_evicted():
    off, on = run(OLDER), run(OLDER, grow_preempt=True)
    s = summary(on)
    assert s["grow_preemptions"] == 0 and s["grow_declined"] >= 1
    assert by_id(on)[2].preemptions == 0
    assert [(j.id, j.first_start, j.end) for j in on.jobs] == [(j.id, j.first_start, j.end) for j in off.jobs]


# ------------------------------------------------------------------ regrouping
# Four one-GPU jobs run alone on four GPUs for a long time; a two-GPU job waits. Moving two
# of them beside the other two frees two whole GPUs at once.
def spread(ends: float = 20000.0):
    return [*(SimJobSpec(i, float(i), ends, 1, 0, 5 * G, 5 * G) for i in range(4)),
            SimJobSpec(4, 100.0, 1000.0, 2, 0, 5 * G, 5 * G)]


def test_regroup_consolidates_packed_jobs_to_start_a_waiting_multi_gpu_job():
    res = run(spread(), gpus=4, regroup=True, movable_fraction=1.0)
    s = summary(res)
    jobs = by_id(res)
    head = jobs[4]
    assert s["regroup_plans"] == 1 and s["regroup_moves"] == 2
    # starts when the plan says: the checkpoint signal's grace time, then the requeue
    assert head.first_start == pytest.approx(100.0 + 120 + 30)
    assert head.end == pytest.approx(head.first_start + 1000.0)
    moved = [j for j in res.jobs if j.moves]
    assert len(moved) == 2
    for j in moved:  # nothing lost since the checkpoint; requeue and restart redone
        assert j.lost_work == pytest.approx(30 + 60)
        assert j.shared_with  # now beside another job
    assert s["regroup_lost_work_s"] == pytest.approx(2 * 90)
    assert s["multi_gpu_avg_queue_s"] == pytest.approx(150.0)
    off = summary(run(spread(), gpus=4))
    assert off["multi_gpu_avg_queue_s"] > 19000 and off["avg_jct_s"] > s["avg_jct_s"]


@pytest.mark.parametrize("kw", [
    {"movable_fraction": 0.0},  # nobody declared it can be moved
    {"movable_fraction": 1.0, "regroup_moves_per_plan": 1},  # two moves needed, one allowed
    {"movable_fraction": 1.0, "regroup_moves_per_hour": 0},
])
def test_regroup_moves_nothing_it_may_not(kw):
    res = run(spread(), gpus=4, regroup=True, **kw)
    s = summary(res)
    assert s["regroup_moves"] == 0 and not any(j.moves for j in res.jobs)
    assert by_id(res)[4].first_start >= 20000.0


def test_regroup_waits_when_the_gpus_free_themselves_soon():
    # the four jobs end 400 s after the head arrives: moving two would gain too little
    res = run(spread(ends=500.0), gpus=4, regroup=True, movable_fraction=1.0)
    s = summary(res)
    assert s["regroup_planner_calls"] >= 1 and s["regroup_moves"] == 0


def test_movable_fraction_is_a_fixed_share_of_jobs():
    picked = [declares_movable(i, 0.3) for i in range(20000)]
    assert 0.28 < sum(picked) / len(picked) < 0.32
    assert picked == [declares_movable(i, 0.3) for i in range(20000)]
    assert not any(declares_movable(i, 0.0) for i in range(1000))
    assert all(declares_movable(i, 1.0) for i in range(1000))


def test_switches_need_colocate():
    with pytest.raises(ValueError, match="colocate"):
        SimConfig(policy="shard-fixed", gpus=2, grow_preempt=True)
    with pytest.raises(ValueError, match="movable-fraction"):
        SimConfig(policy="colocate", gpus=2, regroup=True, movable_fraction=1.5)


@pytest.mark.parametrize("kw", [{"grow_preempt": True},
                                {"grow_preempt": True, "regroup": True, "movable_fraction": 0.5}])
def test_fast_path_still_gives_the_reference_results(kw):
    from tests.unit.simulator.test_sim_fast_and_colocate import PAIRS as P, PROFILES as PR, outcome, random_trace

    specs = random_trace(400, seed=7)
    runs = {fast: simulate(SimConfig(policy="colocate", gpus=6, predictor=True, fast=fast, bf_depth=20,
                                     **kw), specs, PR, P) for fast in (True, False)}
    assert outcome(runs[True]) == outcome(runs[False])
    calls = {"regroup_planner_calls": 0}  # how often it looked depends on the passes run
    assert runs[True].actions | calls == runs[False].actions | calls
    assert runs[True].actions["grow_restarts_in_place"] > 0
    if kw.get("regroup"):  # consulted (short jobs: never worth a move here)
        assert runs[True].actions["regroup_planner_calls"] > 0


def test_a_warning_the_rules_would_keep_still_grows_when_the_grow_decision_evicts():
    """The helper's grow watch runs before its memory watch: a warned job the grow decision
    evicts for grows in place whatever a restart is priced at; one it cannot evict for (its
    neighbour is older) is priced, and a restart made dear keeps it running into its OOM."""
    from dataclasses import replace

    from simulator import Simulator

    def with_dear_restarts(specs):
        cfg = SimConfig(policy="colocate", gpus=1, gpu_model="H100-80GB", predictor=True, known_history=True,
                        pair_knowledge="oracle", grow_preempt=True)
        sim = Simulator(cfg, specs, PROFILES, PAIRS)
        sim = Simulator(cfg, specs, PROFILES, PAIRS, rules=replace(sim.rules, restart_cost_s=1e7, oom_penalty_s=0.0))
        res = sim.run()
        return summary(res), by_id(res)

    s, jobs = with_dear_restarts(YOUNGER)
    assert s["grow_preemptions"] == 1 and s["memory_warnings_kept"] == 0 and jobs[1].pred_restarts == 1
    s, jobs = with_dear_restarts(OLDER)
    assert s["memory_warnings_kept"] >= 1 and s["memory_warnings_restarted"] == 0
    assert jobs[1].pred_restarts == 0 and jobs[1].oom_restarts >= 1 and s["grow_preemptions"] == 0
