"""The simulator on small hand-made traces whose right answer is known."""
from __future__ import annotations

import pytest

from simulator import (PairTable, SimConfig, SimJobSpec, WorkloadProfile, simulate,
                                    summary)

G = 1 << 30

# profile 0: small, light; 1: small, light, hurts 0 badly; 2: busy (util 95 %)
PROFILES = [
    WorkloadProfile(0, "small/a", 4 * G, 30.0, 100.0, 0),
    WorkloadProfile(1, "small/b", 4 * G, 40.0, 100.0, 0),
    WorkloadProfile(2, "busy/c", 6 * G, 95.0, 100.0, 2),
]
MEASURED = {(0, 0): 0.95, (0, 1): 0.70, (1, 0): 0.98, (1, 1): 0.95,
            (0, 2): 0.6, (2, 0): 0.6, (1, 2): 0.6, (2, 1): 0.6, (2, 2): 0.5}
PAIRS = PairTable(PROFILES, MEASURED)


def job(i, submit, duration, gpus=1, profile=0, mem1=None):
    mem0 = PROFILES[profile].mem_bytes
    return SimJobSpec(i, float(submit), float(duration), gpus, profile, mem0, mem1 or mem0)


def run(policy, specs, gpus=1, **kw):
    kw.setdefault("known_history", True)
    res = simulate(SimConfig(policy=policy, gpus=gpus, **kw), specs, PROFILES, PAIRS)
    return res, {j.id: j for j in res.jobs}


def test_exclusive_is_fifo_on_one_gpu():
    res, j = run("exclusive", [job(0, 0, 100), job(1, 1, 10), job(2, 2, 10)])
    assert [j[i].first_start for i in range(3)] == [0, 100, 110]
    assert res.makespan == 120
    s = summary(res)
    assert s["jobs"] == 3 and s["avg_queue_s"] == pytest.approx((0 + 99 + 108) / 3)


def test_two_jobs_that_fit_share_one_gpu_under_colocate():
    res, j = run("colocate", [job(0, 0, 100), job(1, 10, 100)])
    assert j[1].first_start == 10  # no idle GPU: packed beside job 0 at once
    assert j[0].shared_with == {1} and j[1].shared_with == {0}
    # both run at the measured speed 0.95 while together
    assert j[0].min_rate == pytest.approx(0.95) and j[1].min_rate == pytest.approx(0.95)
    assert j[1].shards is not None  # packed as K shares by packer.decide
    assert summary(res)["pair_bound_ok"] is True


def test_colocate_does_not_pack_while_a_gpu_is_idle():
    _, j = run("colocate", [job(0, 0, 100), job(1, 10, 100)], gpus=2)
    assert j[0].gpu_ids != j[1].gpu_ids or j[1].end is not None
    assert not j[1].shared_with


def test_backfill_starts_a_short_job_but_not_a_long_one():
    specs = [
        job(0, 0, 100),  # holds GPU 0 until 100
        job(1, 1, 50, gpus=2),  # head: needs both GPUs, reserved at 100
        job(2, 2, 50),  # fits before the reservation: backfilled at 2
        job(3, 3, 500),  # would delay the head: waits
    ]
    _, j = run("exclusive", specs, gpus=2)
    assert j[2].first_start == 2
    assert j[1].first_start == 100
    assert j[3].first_start >= 150


def test_preemption_on_slowdown_and_pair_avoidance():
    # job 1 (profile 1) slows job 0 (profile 0) to 0.70: > 10 % lost -> requeued after
    # monitor_s, the pair is remembered; job 2 (same workload as 1) is not packed beside 0.
    # Without the pair prediction (pack, then watch for contention): packed, then requeued.
    specs = [job(0, 0, 1000), job(1, 10, 100, profile=1), job(2, 500, 100, profile=1)]
    res, j = run("colocate", specs, monitor_s=60, pair_predict=False, corunner_rule="lowest-util")
    assert j[1].preemptions == 1 and j[1].lost_work == pytest.approx(60 * 0.98)
    assert res.avoided_pairs == 1
    assert j[1].first_start == 10 and j[1].end > 1000  # restarted when job 0 left
    assert not j[2].shared_with or 0 not in j[2].shared_with
    s = summary(res)
    assert s["jobs_preempted"] == 1 and s["preemptions"] == 1


def test_busy_jobs_are_not_packed_and_lucid_keeps_jumbo_alone():
    # the feature model at its mean (processor sharing before a fit), not a trial at its upper bound
    _, j = run("colocate", [job(0, 0, 100), job(1, 1, 10, profile=2)], admission="slowdown-bound",
               pair_knowledge="observed")
    assert j[1].first_start == 100  # the pair at 0.6 < 0.9: waits for a whole GPU
    # load-aware: 10 s at 0.6 beside job 0 (~13 s lost) beats waiting 99 s
    _, j = run("colocate", [job(0, 0, 100), job(1, 1, 10, profile=2)])
    assert j[1].first_start == 1 and j[1].shared_with == {0}
    _, j = run("lucid-like", [job(0, 0, 100), job(1, 1, 10, profile=2)])
    assert j[1].first_start == 100


def test_shard_fixed_packs_two_per_gpu_even_with_idle_gpus():
    _, j = run("shard-fixed", [job(0, 0, 100), job(1, 1, 100)], gpus=2)
    assert j[0].gpu_ids == j[1].gpu_ids and j[1].first_start == 1


def test_mig_in_order_runs_small_jobs_side_by_side():
    res, j = run("mig-in-order", [job(0, 0, 100), job(1, 1, 100)], gpus=1)
    assert j[1].first_start == 1 and j[0].inst != j[1].inst
    assert res.reconfig_creates >= 2
    # sized by memory only, as the node agent sizes it (one share: a 1g slice); 30 % busy
    # alone, it runs at 1/7 / 0.30 of its speed there
    assert j[0].inst.profile == "1g.10gb" and j[0].min_rate == pytest.approx(1 / 7 / 0.30)


def test_mig_static_routes_by_memory_and_never_reconfigures():
    res, j = run("mig-static", [job(0, 0, 100), job(1, 0, 100)], gpus=2)
    assert j[0].inst is not None and j[1].inst is not None
    assert res.reconfig_creates == 0
    assert j[0].min_rate < 1.0  # 1/7 of the compute for a 30 % job


def test_predictor_restarts_a_growing_job_before_it_runs_out_of_memory():
    # job 1 is packed on a few shares; its memory grows 4 -> 12 GiB: past its shares
    specs = [job(0, 0, 100_000), job(1, 10, 10_000, mem1=12 * G)]
    off, j_off = run("colocate", specs)
    on, j_on = run("colocate", specs, predictor=True)
    assert j_off[1].oom_restarts == 1 and j_off[1].pred_restarts == 0
    assert j_on[1].pred_restarts == 1 and j_on[1].oom_restarts == 0
    assert j_on[1].lost_work < j_off[1].lost_work  # warned before the crash
    assert summary(on)["predictive_restarts"] == 1


def test_jobs_larger_than_the_cluster_are_skipped_not_hung():
    res, _ = run("exclusive", [job(0, 0, 10, gpus=4), job(1, 0, 10)], gpus=2)
    assert res.skipped == 1 and summary(res)["jobs"] == 1


def test_config_rejects_unknown_policy():
    with pytest.raises(ValueError, match="colocate"):
        SimConfig(policy="nope", gpus=1)


def test_load_aware_admission_packs_when_waiting_costs_more_than_the_pair_loses():
    # profile 0 beside 1: 0.70 and 0.98 (1.68 GPUs of work). Job 1 would wait 990 s for the
    # GPU; together they lose ~33 s: the load-aware rule packs it and the contention watch keeps it (0.70
    # is within the fairness floor 0.5); the 10 % slowdown bound refuses it.
    specs = [job(0, 0, 1000), job(1, 10, 100, profile=1)]
    _, j = run("colocate", specs, predictor=True)
    assert j[1].first_start == 10 and j[1].preemptions == 0 and j[0].min_rate == pytest.approx(0.70)
    _, j = run("colocate", specs, predictor=True, admission="slowdown-bound", pair_knowledge="oracle")
    assert j[1].first_start == 1000
    _, j = run("colocate", specs, predictor=True, admission="slowdown-bound")  # packed on a guess
    assert j[1].preemptions == 1 and j[1].end > 1000  # then the contention watch (10 %) requeues it


def test_load_aware_admission_lets_a_job_wait_when_the_gpu_frees_soon():
    # two busy jobs at 0.5 each (one GPU of work together): the newcomer waits 10 s instead
    # of overlapping for 20 s at half speed; with 990 s to wait it packs
    # (the pair judged at its predicted mean: the feature model's processor sharing)
    _, j = run("colocate", [job(0, 0, 100, profile=2), job(1, 90, 1000, profile=2)], predictor=True,
               pair_knowledge="observed")
    assert j[1].first_start == 100 and not j[1].shared_with
    # the default knowledge (the rules' pair model) tries the unmeasured pair at its upper
    # bound (nothing fitted yet: a wide spread), so it packs at once and then measures it
    _, j = run("colocate", [job(0, 0, 100, profile=2), job(1, 90, 1000, profile=2)], predictor=True)
    assert j[1].first_start == 90
    _, j = run("colocate", [job(0, 0, 1000, profile=2), job(1, 10, 100, profile=2)], predictor=True)
    assert j[1].first_start == 10 and j[1].shared_with == {0}


def test_load_aware_admission_reads_the_wait_from_the_jobs_place_in_the_queue():
    # GPUs free at 100 and 5000. The head (job 2) would wait 90 s: beside either job it
    # loses more than that (pair 0.6 / 0.6) and does not pack at once. Job 3, behind it,
    # would wait for the second release (~4990 s): packing pays for it at once. With the
    # first release as every job's wait (89 s) it would not.
    specs = [job(0, 0, 100), job(1, 0, 5000), job(2, 10, 1000, profile=2), job(3, 11, 1000, profile=2)]
    _, j = run("colocate", specs, gpus=2, predictor=True, pair_knowledge="oracle")
    assert j[3].first_start == 11 and j[3].shared_with
    assert j[2].first_start > 11


def test_a_requeued_job_waits_slurms_requeue_delay_unless_the_helper_lifts_it():
    """Slurm pushes a requeued job's BeginTime back by cred_expire + 1 s (121 s by default);
    the helper lifts it at its next round (`[monitor] skip_requeue_delay`)."""
    specs = [job(0, 0, 100_000), job(1, 10, 10_000, mem1=12 * G)]  # job 1 runs out of memory, requeued
    _, lifted = run("colocate", specs)
    _, slurm_default = run("colocate", specs, skip_requeue_delay=False)  # cred_expire = 120 s
    assert lifted[1].oom_restarts == slurm_default[1].oom_restarts == 1
    assert slurm_default[1].start - lifted[1].start == pytest.approx(120.0)
    assert slurm_default[1].end - lifted[1].end == pytest.approx(120.0)
    _, short = run("colocate", specs, skip_requeue_delay=False, cred_expire_s=10.0)  # the dev cluster's
    assert short[1].start - lifted[1].start == pytest.approx(10.0)
