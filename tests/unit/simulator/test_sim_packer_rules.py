"""The pure co-runner and contention rules (packer/corunner.py, packer/contention.py)."""
from __future__ import annotations

import pytest

from packer.contention import Sharer, check_contention, speed_loss
from packer.corunner import GpuLoad, Newcomer, RunningJob, choose_corunner, pair_key

G = 1 << 30


def gpu(gid: str, *mems: float, workload: str = "w", util: float = 50.0) -> GpuLoad:
    jobs = tuple(RunningJob(f"{gid}-{i}", workload, int(m * G), util) for i, m in enumerate(mems))
    return GpuLoad(gid, 80 * G, jobs)


def test_patent_example_lowest_util_and_best_fit():
    # [0052]: newcomer 40 %, running jobs at 70 %, 50 %, 30 % of the memory
    gpus = [gpu("A", 56), gpu("B", 40), gpu("C", 24)]
    new = Newcomer("D", "d", 32 * G)
    low = choose_corunner(new, gpus, "lowest-util")
    assert low.gpu_id == "C" and low.corunners == ("C-0",)
    best = choose_corunner(new, gpus, "best-fit")
    assert best.gpu_id == "B"  # 50 % + 40 % = 90 % <= 95 %; A would be 110 %
    assert "best-fit" in best.reason and "95%" in best.reason


def test_cap_is_inclusive_at_95_percent():
    new = Newcomer("n", "x", 40 * G)
    assert choose_corunner(new, [gpu("A", 36)]).gpu_id == "A"  # exactly 95 %
    none = choose_corunner(new, [gpu("A", 36.5)])
    assert none.gpu_id is None and none.reason.startswith("no-fit")


def test_avoided_pairs_full_gpus_and_idle_gpus():
    new = Newcomer("n", "bert", 4 * G)
    avoided = choose_corunner(new, [gpu("A", 4, workload="resnet")],
                              avoid={pair_key("resnet", "bert")})
    assert avoided.gpu_id is None and avoided.reason == "avoided-pair"
    # a callable works as well (e.g. a store lookup)
    assert choose_corunner(new, [gpu("A", 4, workload="resnet")],
                           avoid=lambda a, b: {a, b} == {"bert", "resnet"}).gpu_id is None
    full = choose_corunner(new, [gpu("A", 4, 4)], max_jobs_per_gpu=2)
    assert full.gpu_id is None and full.reason == "gpus-full"
    idle = choose_corunner(new, [GpuLoad("A", 80 * G, ())])
    assert idle.gpu_id is None and idle.reason == "no-running-job"


def test_ties_are_deterministic_and_bad_rule_raises():
    new = Newcomer("n", "x", 4 * G)
    assert choose_corunner(new, [gpu("B", 8), gpu("A", 8)]).gpu_id == "A"
    with pytest.raises(ValueError, match="lowest-util"):
        choose_corunner(new, [gpu("A", 8)], rule="worst")


def test_contention_requeues_the_newest_and_names_the_pair():
    v = check_contention([
        Sharer(1, "resnet", 0.0, 100.0, 80.0),  # pre-existing, lost 20 %
        Sharer(2, "bert", 50.0, 100.0, 60.0),  # the newcomer (it may lose more: not judged)
    ], threshold=0.10)
    assert v.newcomer == 2 and [h.job_id for h in v.hurt] == [1]
    assert v.avoid_pairs == (pair_key("bert", "resnet"),)
    assert "20%" in v.reason and "requeue 2" in v.reason


def test_contention_within_threshold_and_edge_cases():
    assert check_contention([Sharer(1, "a", 0, 1.0, 0.91), Sharer(2, "b", 5, 1.0, 0.5)]) is None
    assert check_contention([Sharer(1, "a", 0, 1.0, 0.1)]) is None  # alone
    assert check_contention([Sharer(1, "a", 0, None, 0.5), Sharer(2, "b", 5, 1.0, 1.0)]) is None  # unknown
    assert speed_loss(0, 1) is None and speed_loss(2.0, 1.0) == pytest.approx(0.5)
    # exactly 10 % is allowed: "more than" the threshold
    assert check_contention([Sharer(1, "a", 0, 1.0, 0.9), Sharer(2, "b", 5, 1.0, 1.0)]) is None
    # a senior with no workload name is requeued for, never recorded as a pair
    anonymous = check_contention([Sharer(1, None, 0, 1.0, 0.5), Sharer(2, "b", 5, 1.0, 1.0)])
    assert anonymous.newcomer == 2 and anonymous.avoid_pairs == ()
