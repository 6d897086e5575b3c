"""What colocate knows of pair speeds (observed | model | oracle), and honest blind sharing."""
from __future__ import annotations

import pytest

from simulator import PairTable, SimConfig, SimJobSpec, WorkloadProfile, simulate, summary
from simulator.knowledge import PairKnowledge

G = 1 << 30

# 0 and 1 light; the pair (0, 1) hurts job 0 badly although both are light (a surprise for
# any model of utilisation); 2 and 3 light and fine together
PROFILES = [
    WorkloadProfile(0, "light/a", 4 * G, 30.0, 100.0, 0),
    WorkloadProfile(1, "light/b", 4 * G, 30.0, 100.0, 0),
    WorkloadProfile(2, "light/c", 30 * G, 30.0, 100.0, 0),
    WorkloadProfile(3, "light/d", 4 * G, 20.0, 100.0, 0),
]
MEASURED = {(0, 1): 0.50, (1, 0): 0.95, (0, 0): 0.95, (1, 1): 0.95}
PAIRS = PairTable(PROFILES, MEASURED)


def spec(i, submit, duration, profile=0, mem1=None):
    mem0 = PROFILES[profile].mem_bytes
    return SimJobSpec(i, float(submit), float(duration), 1, profile, mem0, mem1 or mem0)


def run(specs, gpus=1, **kw):
    kw.setdefault("known_history", True)
    # the 10 % slowdown bound: these test prediction, learning and requeue under that rule
    # (the load-aware admission: tests/unit/packer/test_admission.py, test_sim_engine.py)
    kw.setdefault("admission", "slowdown-bound")
    res = simulate(SimConfig(policy="colocate", gpus=gpus, **kw), specs, PROFILES, PAIRS)
    return res, {j.id: j for j in res.jobs}


def test_oracle_never_packs_the_hurting_pair():
    res, j = run([spec(0, 0, 1000), spec(1, 10, 100, profile=1)], pair_knowledge="oracle")
    assert j[1].first_start == 1000 and summary(res)["preemptions"] == 0


@pytest.mark.parametrize("mode", ["observed", "model"])
def test_a_policy_that_has_not_seen_the_pair_learns_it_by_a_requeue(mode):
    # utilisation says 30 + 30 % fits: packed; the contention watch sees job 0 at 0.5 and requeues job 1
    specs = [spec(0, 0, 1000), spec(1, 10, 100, profile=1)]
    res, j = run(specs, pair_knowledge=mode)
    s = summary(res)
    assert j[1].preemptions == 1 and s["lost_gpu_s"] > 0
    assert s["pred_n"] == 2 and s["pred_unseen_n"] == 2
    assert s["pred_mae"] == pytest.approx(((1.0 - 0.5) + (1.0 - 0.95)) / 2)
    assert s["pairs_observed"] == 2


def test_observed_remembers_a_pair_it_ran_and_model_does_not():
    # job 3 (profile 1) arrives while job 0 still runs: the pair is known (and avoided)
    specs = [spec(0, 0, 5000), spec(1, 10, 100, profile=1), spec(3, 400, 100, profile=1)]
    _, j = run(specs, pair_knowledge="observed")
    assert j[1].preemptions == 1  # learnt here (and the pair is avoided from now on)
    assert j[3].preemptions == 0 and j[3].first_start >= 5000
    k = PairKnowledge("observed", PROFILES, PAIRS)
    k.observe(0, 1)
    assert k.speed(0, 1) == 0.5 and k.known(0, 1) and not k.known(1, 0)
    m = PairKnowledge("model", PROFILES, PAIRS)
    m.observe(0, 1)
    assert m.speed(0, 1) == pytest.approx(1.0) and not m.known(0, 1)


def test_feature_model_refits_on_observed_pairs():
    profiles = [WorkloadProfile(i, f"w/{i}", (2 + i % 5) * G, 10.0 + 4 * i, 1.0, 0)
                for i in range(20)]
    # the truth: every pair loses 20 % (utilisation says most lose nothing)
    measured = {(a, b): 0.8 for a in range(20) for b in range(20)}
    k = PairKnowledge("model", profiles, PairTable(profiles, measured))
    assert k.speed(0, 1) == pytest.approx(1.0)  # prior: processor sharing
    for a in range(10):
        for b in range(10):
            k.observe(a, b)
    assert k.speed(15, 18) == pytest.approx(0.8, abs=0.05)  # never seen, learnt from features
    assert k.model_error()["model_mae_all_measured"] < 0.05


def test_unknown_knowledge_mode_is_refused():
    with pytest.raises(ValueError, match="pair-knowledge"):
        SimConfig(policy="colocate", gpus=1, pair_knowledge="psychic")


def test_blind_sharing_runs_out_of_memory_when_two_jobs_exceed_the_gpu():
    # shard-fixed packs two per GPU whatever their memory: 30 + 60 GiB > 80 GiB on an A100-80GB
    big = SimJobSpec(1, 10.0, 100.0, 1, 2, 60 * G, 60 * G)
    specs = [spec(0, 0, 1000, profile=2), big]
    res = simulate(SimConfig(policy="shard-fixed", gpus=1), specs, PROFILES, PAIRS)
    j = {x.id: x for x in res.jobs}
    assert j[1].oom_restarts == 1  # failed at start-up, resubmitted alone
    assert j[1].end == pytest.approx(1000 + 100)
    # a growing job beside a neighbour hits the neighbour's memory, not the GPU's
    grow = SimJobSpec(1, 10.0, 100.0, 1, 2, 30 * G, 70 * G)
    res = simulate(SimConfig(policy="shard-fixed", gpus=1), [spec(0, 0, 1000, profile=2), grow],
                   PROFILES, PAIRS)
    assert {x.id: x for x in res.jobs}[1].oom_restarts == 1
    # alone, the same growing job fits the GPU
    res = simulate(SimConfig(policy="shard-fixed", gpus=1), [grow], PROFILES, PAIRS)
    assert res.jobs[0].oom_restarts == 0


def test_colocate_packs_a_third_job_only_when_every_job_keeps_its_floor():
    profiles = [WorkloadProfile(0, "tiny/a", 2 * G, 10.0, 1.0, 0),
                WorkloadProfile(1, "busy/b", 2 * G, 90.0, 1.0, 2)]
    measured = {(0, 0): 0.97, (0, 1): 0.6, (1, 0): 0.9, (1, 1): 0.5}
    pairs = PairTable(profiles, measured)

    def go(specs, k):
        cfg = SimConfig(policy="colocate", gpus=1, known_history=True, max_jobs_per_gpu=k,
                        pair_knowledge="oracle")
        return {j.id: j for j in simulate(cfg, specs, profiles, pairs).jobs}

    tiny = [SimJobSpec(i, float(i), 1000.0, 1, 0, 2 * G, 2 * G) for i in range(4)]
    j = go(tiny, 3)
    assert [j[i].first_start for i in range(3)] == [0, 1, 2]  # 0.97 x 0.97 = 0.94 >= 0.90
    assert j[0].min_rate == pytest.approx(0.97 * 0.97) and j[3].first_start > 2
    j = go(tiny, 2)
    assert j[2].first_start > 2  # two per GPU at most by default


@pytest.mark.parametrize("mode", ["observed", "oracle"])
def test_fast_path_matches_the_reference_with_three_per_gpu(mode):
    import random

    rng = random.Random(11)
    specs, t = [], 0.0
    for i in range(400):
        t += rng.expovariate(1 / 40.0)
        prof = rng.randrange(4)
        mem0 = PROFILES[prof].mem_bytes
        grow = rng.choice([1.0] * 6 + [2.0])
        specs.append(SimJobSpec(i, t, rng.lognormvariate(5.5, 1.2), rng.choice([1] * 8 + [2]),
                                prof, mem0, int(mem0 * grow)))
    runs = {}
    for fast in (True, False):
        cfg = SimConfig(policy="colocate", gpus=4, predictor=True, fast=fast, bf_depth=20,
                        max_jobs_per_gpu=3, pair_knowledge=mode, contention_threshold=0.2)
        runs[fast] = simulate(cfg, specs, PROFILES, PAIRS)

    def outcome(res):
        return [(j.id, j.first_start, j.end, j.preemptions, j.oom_restarts, j.pred_restarts,
                 tuple(j.gpu_ids)) for j in res.jobs]

    assert outcome(runs[True]) == outcome(runs[False])
    assert any(len(set(j.shared_with)) >= 2 for j in runs[True].jobs)  # some ran three to a GPU
