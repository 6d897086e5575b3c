"""The fast scheduling path against the reference one, the release index, colocate's pair
prediction and the backfill rule for packs."""
from __future__ import annotations

import math
import random

import pytest

from packer.corunner import GpuLoad, Newcomer, RunningJob, choose_corunner, predicted_speeds
from simulator import (POLICIES, PairTable, SimConfig, SimJobSpec, Simulator,
                                    WorkloadProfile, simulate, summary)
from simulator.scheduling import Scheduler

G = 1 << 30

# 0, 1: light and complementary (measured); 2: busy, hurts everyone; 3: light, never measured
PROFILES = [
    WorkloadProfile(0, "light/a", 4 * G, 30.0, 100.0, 0),
    WorkloadProfile(1, "light/b", 6 * G, 40.0, 100.0, 0),
    WorkloadProfile(2, "busy/c", 8 * G, 95.0, 100.0, 2),
    WorkloadProfile(3, "light/d", 3 * G, 10.0, 100.0, 0),
]
MEASURED = {(0, 0): 0.92, (0, 1): 0.97, (1, 0): 0.93, (1, 1): 0.90,
            (0, 2): 0.55, (2, 0): 0.92, (1, 2): 0.60, (2, 1): 0.80, (2, 2): 0.5}
PAIRS = PairTable(PROFILES, MEASURED)


def spec(i, submit, duration, gpus=1, profile=0, grow=1.0):
    mem0 = PROFILES[profile].mem_bytes
    return SimJobSpec(i, float(submit), float(duration), gpus, profile, mem0, int(mem0 * grow))


def random_trace(n: int, seed: int) -> list[SimJobSpec]:
    rng = random.Random(seed)
    t = 0.0
    out = []
    for i in range(n):
        t += rng.expovariate(1 / 40.0)
        gpus = rng.choice([1] * 8 + [2, 4])
        grow = rng.choice([1.0] * 6 + [2.5])
        out.append(spec(i, t, rng.lognormvariate(5.5, 1.2), gpus, rng.randrange(4),
                        grow if gpus == 1 else 1.0))
    return out


def outcome(res):
    return [(j.id, j.first_start, j.end, j.preemptions, j.oom_restarts, j.pred_restarts,
             tuple(j.gpu_ids)) for j in res.jobs]


@pytest.mark.parametrize("policy", POLICIES)
def test_fast_path_gives_the_reference_results(policy):
    specs = random_trace(400, seed=POLICIES.index(policy))
    runs = {}
    for fast in (True, False):
        cfg = SimConfig(policy=policy, gpus=6, predictor=policy != "exclusive", fast=fast,
                        bf_depth=20)
        runs[fast] = simulate(cfg, specs, PROFILES, PAIRS)
    assert outcome(runs[True]) == outcome(runs[False])
    assert summary(runs[True]) | {"sim_wall_s": 0, "sim_passes": 0, "sim_passes_skipped": 0} == \
        summary(runs[False]) | {"sim_wall_s": 0, "sim_passes": 0, "sim_passes_skipped": 0}
    # the optimisation did something: passes were skipped, the reference ran them all
    assert runs[True].passes_skipped > 0 and runs[False].passes_skipped == 0
    assert runs[True].passes < runs[False].passes


class _CheckedScheduler(Scheduler):
    """Checks the sorted release index against a scan of every GPU at each reservation."""

    checked = 0

    def reservation(self, head, now):
        got = super().reservation(head, now)
        sim = self.engine  # the run it checks (the scan reads every GPU and the MIG side)
        need, free = head.gpus, len(sim.idle)
        if not (sim.mig and need == 1) and need > free:
            releases = sorted(max(j.t_end for j in g.jobs) for g in sim.gpus
                              if g.jobs and not g.static)
            k = need - free
            if k > len(releases):
                want = (math.inf, 0)
            else:
                shadow = releases[k - 1]
                want = (shadow, max(0, free + sum(1 for r in releases if r <= shadow) - need))
            assert got == want
            type(self).checked += 1
        return got


@pytest.mark.parametrize("policy", ["exclusive", "colocate", "shard-fixed", "mig-in-order"])
def test_release_index_matches_a_scan(policy, monkeypatch):
    _CheckedScheduler.checked = 0
    monkeypatch.setattr("simulator.engine.Scheduler", _CheckedScheduler)  # the one every part is given
    sim = Simulator(SimConfig(policy=policy, gpus=6, bf_depth=20), random_trace(300, 7),
                    PROFILES, PAIRS)
    assert type(sim.sched) is _CheckedScheduler
    sim.sched.engine = sim
    sim.run()
    assert _CheckedScheduler.checked > 10


def run(policy, specs, gpus=1, **kw):
    kw.setdefault("known_history", True)
    # the 10 % slowdown bound: these test prediction, learning and requeue under that rule
    # (the load-aware admission: tests/unit/packer/test_admission.py, test_sim_engine.py)
    kw.setdefault("admission", "slowdown-bound")
    kw.setdefault("pair_knowledge", "oracle")  # these test the rule given the pair speeds
    res = simulate(SimConfig(policy=policy, gpus=gpus, **kw), specs, PROFILES, PAIRS)
    return res, {j.id: j for j in res.jobs}


def test_colocate_predicts_the_slowdown_and_does_not_pack_a_hurting_pair():
    # job 1 (busy, profile 2) beside job 0 (profile 0) would leave job 0 at 0.55: not packed,
    # so no preemption churn; it waits for the GPU instead
    res, j = run("colocate", [spec(0, 0, 1000), spec(1, 10, 100, profile=2)])
    assert j[1].first_start == 1000 and not j[0].shared_with
    assert summary(res)["preemptions"] == 0
    # the other way round the incumbent (busy) keeps 0.92: packed, though it is busy
    res, j = run("colocate", [spec(0, 0, 1000, profile=2), spec(1, 10, 100, profile=0)])
    assert j[1].first_start == 10 and j[0].min_rate == pytest.approx(0.92)
    assert j[1].min_rate == pytest.approx(0.55) and summary(res)["preemptions"] == 0


def test_colocate_best_pair_picks_the_most_throughput():
    # two GPUs busy with profile 0 and profile 1; a newcomer of profile 0 gains most beside
    # profile 1 (0.97 + 0.93) rather than beside profile 0 (0.92 + 0.92)
    specs = [spec(0, 0, 1000, profile=0), spec(1, 0, 1000, profile=1), spec(2, 10, 100)]
    _, j = run("colocate", specs, gpus=2)
    assert j[2].shared_with == {1}
    _, j = run("colocate", specs, gpus=2, corunner_rule="lowest-util")
    assert j[2].shared_with == {0}  # lowest memory in use


def test_unmeasured_pair_is_predicted_from_utilisation():
    # profile 3 (10 %) beside profile 2 (95 %) was never measured: 100 / 105 each
    res, j = run("colocate", [spec(0, 0, 1000, profile=2), spec(1, 10, 100, profile=3)])
    assert j[1].first_start == 10 and j[1].min_rate == pytest.approx(100 / 105)
    s = summary(res)
    assert s["jobs_in_unmeasured_pairs"] == 2 and s["preemptions"] == 0


def test_pack_beside_a_job_that_outlasts_the_reservation_is_backfilled():
    # GPU 0: job 0 (light) until t_a; GPUs 1, 2: busy jobs 1 and 2 until 100 and 200. Head
    # job 3 needs 2 GPUs. Job 4 (long, light) can only pack beside job 0 (beside a busy
    # job the incumbent would keep 0.80 < 0.90).
    def trace(t_a):
        return [spec(0, 0, t_a), spec(1, 0, 100, profile=2), spec(2, 0, 200, profile=2),
                spec(3, 1, 50, gpus=2), spec(4, 2, 20_000, profile=1)]

    # t_a = 10000: the reservation (at 200, GPUs 1 and 2) does not count on GPU 0, so the
    # long job packs at once without delaying the head
    res, j = run("colocate", trace(10_000), gpus=3)
    assert j[4].first_start == 2 and j[4].shared_with == {0}
    assert j[3].first_start == 200
    # t_a = 150: the reservation (at 150) counts on GPU 0; packing there would delay the
    # head, so the long job waits (the head starts at 150, then job 4 when GPU 2 frees)
    res, j = run("colocate", trace(150), gpus=3)
    assert j[3].first_start == 150
    assert j[4].first_start == 200 and not j[4].shared_with
    assert summary(res)["pair_bound_ok"] is True


def test_pair_bound_holds_on_a_random_trace_for_every_shared_policy():
    specs = random_trace(500, 3)
    for policy in ("colocate", "shard-fixed", "lucid-like"):
        for pred in (False, True):
            s = summary(simulate(SimConfig(policy=policy, gpus=5, predictor=pred), specs,
                                 PROFILES, PAIRS))
            assert s["jobs_unfinished"] == 0
            assert s["pair_bound_ok"] is True and s["pair_bound_worst"] <= 1.0 + 1e-6
            assert s["pair_bound_jobs"] > 0


# packer.corunner additions ---------------------------------------------------------------
def _gpu(gid, workload, mem_gib, util):
    return GpuLoad(gid, 80 * G, (RunningJob(f"{gid}-0", workload, mem_gib * G, util),))


SPEEDS = {("n", "a"): 0.9, ("a", "n"): 0.95, ("n", "b"): 0.6, ("b", "n"): 1.0}


def speed(x, y):
    return SPEEDS.get((x, y))


def test_predicted_speeds_measured_and_fallback():
    new = Newcomer("n1", "n", 4 * G, 50.0)
    assert predicted_speeds(new, _gpu("A", "a", 4, 30.0), speed) == (0.9, (0.95,))
    # never measured: aggregate utilisation 50 + 70 = 120 % -> 100 / 120 each
    mine, theirs = predicted_speeds(new, _gpu("C", "c", 4, 70.0), speed)
    assert mine == pytest.approx(100 / 120) and theirs == (pytest.approx(100 / 120),)
    assert predicted_speeds(new, _gpu("C", "c", 4, 40.0), speed) == (1.0, (1.0,))
    assert predicted_speeds(Newcomer("n1", "n", 4 * G), _gpu("C", "c", 4, 40.0), speed) is None


def test_best_pair_rule_and_speed_floors():
    new = Newcomer("n1", "n", 4 * G, 50.0)
    gpus = [_gpu("A", "a", 4, 30.0), _gpu("B", "b", 2, 30.0)]
    # best-pair: A gives 0.9 + 0.95, B gives 0.6 + 1.0
    ch = choose_corunner(new, gpus, rule="best-pair", pair_speed=speed)
    assert ch.gpu_id == "A" and "predicted throughput 1.85" in ch.reason
    # lowest-util would take B (less memory in use); a newcomer floor of 0.7 rules B out
    assert choose_corunner(new, gpus, rule="lowest-util").gpu_id == "B"
    assert choose_corunner(new, gpus, rule="lowest-util", pair_speed=speed,
                           min_newcomer_speed=0.7).gpu_id == "A"
    # an incumbent floor of 0.96 rules A out too
    none = choose_corunner(new, gpus, pair_speed=speed, min_corunner_speed=0.96,
                           min_newcomer_speed=0.7)
    assert none.gpu_id is None and none.reason == "predicted-slowdown"
    # a veto (e.g. a reservation) is honoured
    vet = choose_corunner(new, gpus, rule="best-pair", pair_speed=speed,
                          allow=lambda g, mine, theirs: g.gpu_id != "A")
    assert vet.gpu_id == "B"
    with pytest.raises(ValueError, match="pair_speed"):
        choose_corunner(new, gpus, rule="best-pair")


def test_scaling_report_times_jobs_and_gpus(tmp_path):
    from simulator.report import scaling

    (tmp_path / "report.md").write_text("# Simulated policies\n\nbody\n")
    specs = random_trace(300, 5)
    out = scaling([SimConfig(policy="colocate", gpus=4, predictor=True)], specs, PROFILES,
                  PAIRS, job_counts=[100, 300], gpu_counts=[2, 4], out_dir=tmp_path)
    pts = {(r["jobs"], r["gpus"]) for r in out["rows"]}
    assert pts == {(100, 4), (300, 4), (300, 2)}  # (300, 4) is timed once
    assert all(r["sim_wall_s"] >= 0 and r["events"] > 0 for r in out["rows"])
    text = (tmp_path / "scaling.md").read_text()
    assert "jobs^" in text and "GPUs^" in text
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("# Simulated policies") and report.count("## Run time") == 1


@pytest.mark.parametrize("kw", [{}, {"pair_knowledge": "model"}, {"max_jobs_per_gpu": 3},
                                {"corunner_rule": "lowest-util", "pair_predict": False},
                                {"admission": "load-aware"}, {"admission": "load-aware", "max_jobs_per_gpu": 3}])
def test_colocate_skips_without_trying_and_keeps_the_reference_results(kw):
    # the fast path's skips (shapes still without room, jobs ending after the reservation
    # like one refused) happen on a loaded cluster and change nothing. Under the load-aware
    # admission most kinds of GPU qualify (fairness floor 0.5) and a refused pack is never a
    # reason to skip: the results must still be the reference's
    kw = {"admission": "slowdown-bound", **kw}
    aware = kw["admission"] == "load-aware"
    specs = random_trace(600, seed=5)
    sims, outs = {}, {}
    for fast in (True, False):
        sim = sims[fast] = Simulator(SimConfig(policy="colocate", gpus=6, predictor=True,
                                               fast=fast, bf_depth=20, **kw), specs,
                                     PROFILES, PAIRS)
        outs[fast] = sim.run()
    assert outcome(outs[True]) == outcome(outs[False])
    assert summary(outs[True]) | {"sim_wall_s": 0, "sim_passes": 0, "sim_passes_skipped": 0} == \
        summary(outs[False]) | {"sim_wall_s": 0, "sim_passes": 0, "sim_passes_skipped": 0}
    assert aware or (sims[True].policy.full.skips > 0 and sims[True].sched.late_skips > 0)
    assert sims[True].sched.passes_skipped > 0
    assert sims[False].policy.full.skips == 0 and sims[False].sched.late_skips == 0
