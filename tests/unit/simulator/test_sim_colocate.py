"""The colocate policy (`simulator.colocate`) on its own: alone while a GPU is idle, packed only
with a history (the submit path's rule), the queue as its admission reads it, and its hooks
(the contention check after each pack, its summary). The pair prediction and the backfill of
packs: test_sim_fast_and_colocate.py; the requeue on contention: test_sim_engine.py."""
from __future__ import annotations

import math

import pytest

from packer.admission import QueueView
from simulator import PairTable, SimConfig, SimJobSpec, Simulator, WorkloadProfile, simulate
from simulator.colocate import ColocatePolicy
from simulator.events import CHECK
from simulator.registry import policy_type

G = 1 << 30
PROFILES = [
    WorkloadProfile(0, "light/a", 4 * G, 30.0, 100.0, 0),
    WorkloadProfile(1, "light/b", 6 * G, 40.0, 100.0, 0),
]
PAIRS = PairTable(PROFILES, {(0, 0): 0.92, (0, 1): 0.97, (1, 0): 0.93, (1, 1): 0.90})


def spec(i: int, submit: float, duration: float, profile: int = 0, gpus: int = 1) -> SimJobSpec:
    mem = PROFILES[profile].mem_bytes
    return SimJobSpec(i, float(submit), float(duration), gpus, profile, mem, mem)


def run(specs: list[SimJobSpec], gpus: int = 1, **kw):
    kw.setdefault("admission", "slowdown-bound")
    kw.setdefault("pair_knowledge", "oracle")
    res = simulate(SimConfig(policy="colocate", gpus=gpus, **kw), specs, PROFILES, PAIRS)
    return {j.id: j for j in res.jobs}


def policy(gpus: int = 2, **kw) -> ColocatePolicy:
    if not kw.get("pair_predict", True):
        kw.setdefault("corunner_rule", "lowest-util")  # best-pair ranks by the prediction
    sim = Simulator(SimConfig(policy="colocate", gpus=gpus, **kw), [], PROFILES, PAIRS)
    assert isinstance(sim.policy, ColocatePolicy)
    return sim.policy


def test_colocate_is_the_packing_policy_that_learns_pairs():
    assert policy_type("colocate") is ColocatePolicy
    assert ColocatePolicy.packs and ColocatePolicy.learns_pairs


def test_a_job_runs_alone_while_a_gpu_is_idle_and_packs_when_none_is():
    j = run([spec(0, 0, 1000), spec(1, 10, 100, profile=1)], gpus=2, known_history=True)
    assert j[1].first_start == 10 and not j[1].shared_with and not j[0].shared_with
    j = run([spec(0, 0, 1000), spec(1, 10, 100, profile=1)], gpus=1, known_history=True)
    assert j[1].first_start == 10 and j[1].shared_with == {0}


def test_a_job_without_a_history_waits_for_a_whole_gpu():
    # the submit path's rule: an unknown workload runs exclusive and is profiled first
    j = run([spec(0, 0, 1000), spec(1, 10, 100, profile=1)], gpus=1, known_history=False)
    assert j[1].first_start >= 1000 and not j[1].shared_with
    # once a run of profile 1 has finished, the next one of it is packed
    j = run([spec(0, 0, 50, profile=1), spec(1, 60, 1000), spec(2, 100, 100, profile=1)], gpus=1,
            known_history=False)
    assert j[2].first_start == 100 and j[2].shared_with == {1}


def test_the_queue_as_the_admission_reads_it():
    p = policy(gpus=3)
    assert p.queue_view(10.0, 4, idle=True) == QueueView(waiting=4, gpus=3, wait_s=0.0)
    assert p.queue_view(10.0, -1) == QueueView(waiting=0, gpus=3, wait_s=math.inf)  # nothing busy
    p.releases.sorted[:] = [(50.0, 0), (80.0, 2)]  # two busy GPUs, freed at 50 and 80
    assert p.queue_view(10.0, 2).wait_s == 40.0  # the first release is its
    assert p.queue_view(10.0, 2, ahead=1).wait_s == 70.0  # one job ahead takes the first
    assert p.queue_view(10.0, 2, ahead=5).wait_s == 70.0  # the last release known: a lower bound
    assert p.queue_view(100.0, 2).wait_s == 0.0


def test_without_pair_prediction_every_pack_the_rule_picks_pays():
    assert policy(pair_predict=False).pays(None, None, None, 0.0) is True


def test_a_pack_is_checked_monitor_s_later_and_a_start_on_an_idle_gpu_is_not():
    p = policy(monitor_s=60.0)
    job = type("Job", (), {"token": 3})()
    p.joined(None, job, 100.0, was_busy=False)
    assert p.loop.heap == []
    p.joined(None, job, 100.0, was_busy=True)
    assert [(t, kind, j, token) for t, _, kind, j, token in p.loop.heap] == [(160.0, CHECK, job, 3)]


@pytest.mark.parametrize("pair_predict", [False, True])
def test_the_summary_has_the_pair_prediction_only_when_it_predicts(pair_predict):
    got = policy(pair_predict=pair_predict, pair_knowledge="counters").summary()
    assert (got == {}) is not pair_predict
    if pair_predict:
        assert got["pair_knowledge"] == "counters"
