"""Identity levels in the replay (simulator/recurrence.py): which history a job finds, how far
off a looser level's guess is, and a wrong guess contained by restart-oom."""
from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from packer.config import PackerConfig
from simulator import PairTable, SimConfig, SimJobSpec, WorkloadProfile, simulate, summary
from simulator.recurrence import NO_MATCH, QUINTILES, Guesses, Recurrence

G = 1 << 30
PROFILES = [WorkloadProfile(0, "small/a", 4 * G, 30.0, 100.0, 0),
            WorkloadProfile(1, "big/b", 30 * G, 30.0, 100.0, 0)]
PAIRS = PairTable(PROFILES, {(a, b): 0.95 for a in range(2) for b in range(2)})
# the shipped [packer] rules on the replay's A100-80GB: unknown jobs stay exclusive
SHIPPED = PackerConfig(mode="enforce", gpu_model="A100-80GB")


def spec(i, submit, duration, profile=0):
    mem = PROFILES[profile].mem_bytes
    return SimJobSpec(i, float(submit), float(duration), 1, profile, mem, mem)


def run(rec, specs, gpus=1):
    res = simulate(SimConfig(policy="colocate", gpus=gpus, packer=SHIPPED, recurrence=rec), specs, PROFILES, PAIRS)
    return summary(res), {j.id: j for j in res.jobs}


def test_levels_are_drawn_in_the_stated_proportions_and_fixed_by_the_job_id():
    rec = Recurrence(rate=0.6, split=(0.5, 0.3, 0.2))
    n = 20000
    got = Counter(rec.level_of(i) for i in range(n))
    assert got[NO_MATCH] / n == pytest.approx(0.4, abs=0.02)
    assert [got[lv] / n for lv in range(3)] == pytest.approx([0.3, 0.18, 0.12], abs=0.02)
    assert [rec.level_of(i) for i in range(50)] == [Recurrence(rate=0.6).level_of(i) for i in range(50)]
    errs = Counter(rec.error_of(i) for i in range(n))
    assert all(abs(errs[k] / n - 0.2) < 0.02 for k in range(len(QUINTILES)))
    assert {Recurrence(rate=0.0).level_of(i) for i in range(500)} == {NO_MATCH}
    assert NO_MATCH not in {Recurrence(rate=1.0).level_of(i) for i in range(500)}


def test_an_exact_match_knows_the_need_and_a_looser_one_guesses_with_more_headroom():
    rec = Recurrence(error=(0.0, 0.2, 0.5), headroom=(0.0, 0.15, 0.35))
    need = 10 * G
    assert rec.guess_bytes(need, 0, 4) == need
    assert rec.guess_bytes(need, 1, 2) == int(need * 1.15)  # the middle draw: the need, plus headroom
    assert rec.guess_bytes(need, 2, 4) < need < rec.guess_bytes(need, 2, 0)  # off both ways


@pytest.mark.parametrize("bad", [dict(rate=1.5), dict(rate=-0.1), dict(split=(0.5, 0.5, 0.5)),
                                 dict(error=(0.0, -1.0, 0.5)), dict(headroom=(0.0, 0.1)), dict(max_wrong=0)])
def test_bad_recurrence_settings_are_refused(bad):
    with pytest.raises(ValueError):
        Recurrence(**bad)


def test_a_level_that_guesses_wrong_twice_for_a_workload_stops_being_used():
    g = Guesses(Recurrence(max_wrong=2))
    job = SimpleNamespace(profile=3, guess=(2, 4), remembered=0, done=0.0, mem0=20 * G, room=10 * G)
    assert g.level(job) == 2 and g.estimate(job, 30.0) is not None
    g.out_of_memory(job)
    assert g.level(job) == 2 and g.version == 0
    g.out_of_memory(job)
    assert g.level(job) == NO_MATCH and g.estimate(job, 30.0) is None and g.version == 1
    other = SimpleNamespace(profile=4, guess=(2, 4), remembered=0, done=0.0, mem0=20 * G, room=10 * G)
    assert g.level(other) == 2  # another workload keeps the level
    grown = SimpleNamespace(profile=4, guess=(2, 4), remembered=0, done=5.0, mem0=20 * G, room=10 * G)
    g.out_of_memory(grown)  # it ran before it ran out: growth, not a wrong guess
    assert g.summary()["wrong_guesses_name"] == 2


def test_a_later_job_packs_from_a_matched_history_and_waits_without_one():
    # job 0 gives profile 0 a history; job 1 holds the GPU; job 2 comes while it runs
    specs = [spec(0, 0, 10), spec(1, 20, 1000), spec(2, 30, 100)]
    s_known, known = run(Recurrence(rate=1.0, split=(1.0, 0.0, 0.0)), specs)
    assert known[2].first_start == 30 and known[2].shared_with == {1}
    assert s_known["packs_by_exact"] == 1
    s_new, new = run(Recurrence(rate=0.0), specs)
    assert new[2].first_start == pytest.approx(1020) and not new[2].shared_with  # a new identity: exclusive
    assert s_new["packs_by_exact"] == 0


def test_a_wrong_guess_from_a_loose_level_is_a_restart_oom_then_runs():
    # a name-level history 46 times smaller than the job's need (error 3, draw +1.28): one share
    # of 10 GiB for a 30 GiB job; it fails at start-up, is requeued on a size that holds it
    rec = Recurrence(rate=1.0, split=(0.0, 0.0, 1.0), error=(0.0, 0.0, 3.0), headroom=(0.0, 0.0, 0.0))
    wrong_id = next(i for i in range(10, 100) if rec.error_of(i) == len(QUINTILES) - 1)
    specs = [spec(0, 0, 10, profile=1), spec(1, 20, 5000, profile=0), spec(wrong_id, 30, 100, profile=1)]
    s, jobs = run(rec, specs)
    j = jobs[wrong_id]
    assert j.oom_restarts == 1 and j.end is not None and not j.oom_failed
    assert s["wrong_guesses_name"] == 1 and s["oom_jobs_retried"] == 1
