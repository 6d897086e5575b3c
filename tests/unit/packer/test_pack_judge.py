"""The load-aware admission over the GPUs a newcomer could join (SuiteRules.judge_pack): the
live submit path's decision, with the replay's cap on the GPU's total and jobs-per-GPU limit."""
from __future__ import annotations

import math

import pytest

from packer.admission import QueueView, release_wait
from packer.corunner import GpuLoad, Newcomer, RunningJob
from packer.rules import SuiteRules

G = 1 << 30
AWARE = SuiteRules(admission="load-aware")
NEW = Newcomer("new", "b", 10 * G, 50.0)


def gpu(*jobs: tuple[str, str, int], gid: str = "n1:0") -> GpuLoad:
    return GpuLoad(gid, 80 * G, tuple(RunningJob(j, w, m * G, 50.0) for j, w, m in jobs))


def speeds(table: dict[tuple[str, str], float]):
    return lambda a, b: table.get((a, b), 1.0)


def judge(gpus, left, wait, pair, rules=AWARE, avoid=frozenset(), work=3600.0, waiting=0):
    return rules.judge_pack(NEW, work, gpus, left, QueueView(waiting, 4, wait), avoid, pair)


def test_a_long_wait_pays_for_a_pair_that_a_short_wait_does_not():
    pair = speeds({("a", "b"): 0.6, ("b", "a"): 0.6})
    g = gpu(("1", "a", 10))
    # together for an hour at 0.6 each: the pair loses 2 x 0.4 x 3600/0.6 = 4800 s of completion time
    long = judge([g], {"1": 7200.0}, wait=6000.0, pair=pair)
    assert (long.verdict, long.gpu_id) == ("pays", "n1:0") and long.gain == pytest.approx(6000 - 4800)
    short = judge([g], {"1": 7200.0}, wait=600.0, pair=pair)
    assert (short.verdict, short.reason) == ("refused", "pack-does-not-pay")


def test_the_fairness_floor_and_a_pair_that_cannot_run_together_refuse_it():
    g = gpu(("1", "a", 10))
    low = judge([g], {"1": 7200.0}, wait=math.inf, pair=speeds({("b", "a"): 0.4}))
    assert (low.verdict, low.reason) == ("refused", "below-min-speed")
    dead = judge([g], {"1": 7200.0}, wait=math.inf, pair=speeds({("a", "b"): 0.0}))
    assert dead.refused
    # the slowdown-bound rule keeps its own floor: 0.85 is under 1 - 10 %
    bound = SuiteRules(admission="slowdown-bound", contention_threshold=0.1)
    assert judge([g], {"1": 1.0}, wait=0.0, pair=speeds({("a", "b"): 0.85}), rules=bound).refused
    assert judge([g], {"1": 1.0}, wait=0.0, pair=speeds({("a", "b"): 0.95}), rules=bound).verdict == "pays"


def test_an_avoided_partner_is_never_packed_with_but_another_gpu_may_be():
    pair = speeds({})
    bad, good = gpu(("1", "a", 10), gid="n1:0"), gpu(("2", "c", 10), gid="n2:0")
    avoid = {("a", "b")}
    only_bad = judge([bad], {}, wait=math.inf, pair=pair, avoid=avoid)
    assert (only_bad.verdict, only_bad.reason) == ("no-room", "avoided-pair")  # kept off it, not judged
    assert judge([bad, good], {}, wait=math.inf, pair=pair, avoid=avoid).gpu_id == "n2:0"


def test_the_cap_is_on_the_gpus_total_and_the_jobs_per_gpu_limit_holds():
    pair = speeds({})
    # 30 + 37 GiB there: with the newcomer's 10 the GPU would hold 77 of 80 GiB (96 % > 95 %)
    full_memory = gpu(("1", "a", 30), ("2", "c", 37))
    three = SuiteRules(admission="load-aware", max_jobs_per_gpu=3)
    assert judge([full_memory], {}, wait=math.inf, pair=pair, rules=three).verdict == "no-room"
    two_jobs = gpu(("1", "a", 10), ("2", "c", 10))
    assert judge([two_jobs], {}, wait=math.inf, pair=pair).verdict == "no-room"  # default: 2 a GPU
    assert judge([two_jobs], {}, wait=math.inf, pair=pair, rules=three).verdict == "pays"
    assert judge([gpu()], {}, wait=math.inf, pair=pair).verdict == "no-room"  # an idle GPU is not a pack


def test_release_wait_is_the_release_for_the_jobs_ahead_and_one_for_it():
    assert release_wait([300.0, 100.0, 200.0], 0) == 100.0
    assert release_wait([300.0, 100.0, 200.0], 2) == 300.0
    assert release_wait([300.0, 100.0], 5) == 300.0  # fewer known: the last (a lower bound)
    assert release_wait([], 0) == math.inf


def test_gpus_of_one_kind_are_ranked_once_and_each_weighed_with_its_own_work_left():
    pair = speeds({("a", "b"): 0.6, ("b", "a"): 0.6, ("c", "b"): 0.6, ("b", "c"): 0.6})
    # two GPUs of one kind (the same jobs, listed in another order); only the second's jobs end soon
    g1 = GpuLoad("n1:0", 80 * G, (RunningJob("1", "a", 10 * G, 50.0), RunningJob("2", "c", 10 * G, 50.0)))
    g2 = GpuLoad("n2:0", 80 * G, (RunningJob("4", "c", 10 * G, 50.0), RunningJob("3", "a", 10 * G, 50.0)))
    three = SuiteRules(admission="load-aware", max_jobs_per_gpu=3, min_speed=0.3)
    left = {"1": 1e6, "2": 1e6, "3": 60.0, "4": 60.0}
    got = judge([g1, g2], left, wait=600.0, pair=pair, rules=three)
    assert (got.verdict, got.gpu_id) == ("pays", "n2:0")
