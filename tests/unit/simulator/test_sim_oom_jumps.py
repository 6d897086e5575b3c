"""Jobs whose memory jumps in one step, replayed with the live helper's containment and retry
(packer.oom_restart): the jump is seen by no forecast, the job is requeued once on a size that
holds it, and the reports count the jobs retried and the work lost."""
from __future__ import annotations

from dataclasses import replace

from simulator import SimConfig, simulate, summary
from simulator.workload import SimJobSpec, build_jobs
from tests.unit.simulator.test_sim_engine import PAIRS, PROFILES, G, job


def jumping(i, submit, duration, mem1, at=0.5) -> SimJobSpec:
    return replace(job(i, submit, duration, mem1=mem1), jump_at=at)


def run(specs, **kw):
    res = simulate(SimConfig(policy="colocate", gpus=1, known_history=True, **kw), specs, PROFILES, PAIRS)
    return summary(res), {j.id: j for j in res.jobs}


def test_a_jump_past_its_share_is_retried_once_on_a_size_that_holds_it_even_with_the_predictor():
    specs = [job(0, 0, 100_000), jumping(1, 10, 10_000, mem1=12 * G, at=0.5)]
    for predictor in (False, True):
        summ, jobs = run(specs, predictor=predictor)
        j = jobs[1]
        assert j.oom_restarts == 1 and j.pred_restarts == 0 and not j.oom_failed  # no forecast sees a jump
        assert j.end is not None and j.remembered >= 12 * G
        assert abs(j.lost_work - 5_000) < 1.0  # half its work, lost at the jump
        assert summ["oom_jobs_retried"] == 1 and summ["oom_jobs_left_failed"] == 0
        assert abs(summ["oom_lost_work_s"] - 5_000) < 1.0
        assert jobs[0].oom_restarts == 0  # its neighbour is not touched


def test_a_linear_grower_that_keeps_outgrowing_is_left_failed_once_its_retries_are_spent():
    # 4 GiB -> 60 GiB linearly on 10 GiB shares: each OOM asks for one sample more, a share up
    summ, jobs = run([job(0, 0, 100_000), job(1, 10, 10_000, mem1=60 * G)])
    assert jobs[1].oom_failed and jobs[1].oom_restarts == 2
    assert summ["oom_jobs_left_failed"] == 1 and summ["jobs"] == 1


def test_the_jump_share_is_drawn_only_when_asked_so_other_draws_stay_as_they_were():
    from simulator.workload import TraceJob

    trace = [TraceJob(float(i), 100.0, 1) for i in range(400)]
    plain = build_jobs(trace, PROFILES, seed=3, growing_fraction=0.3)
    jumps = build_jobs(trace, PROFILES, seed=3, growing_fraction=0.3, jump_fraction=1.0)
    assert all(s.jump_at is None for s in plain)
    grows = [s for s in jumps if s.grows]
    assert grows and all(0.2 <= s.jump_at <= 0.8 for s in grows)
    assert all(s.jump_at is None for s in jumps if not s.grows)


def test_a_jump_nobody_sees_is_a_miss_the_job_fails_instead_of_being_retried():
    """Issue 35: a silent job whose end is not seen (no report, no text read) and that fails far
    below its limit is left FAILED; the GPU-hours its attempt held are counted."""
    specs = [job(0, 0, 100_000), jumping(1, 10, 10_000, mem1=12 * G, at=0.5)]
    summ, jobs = run(specs, oom_unseen_share=1.0)
    assert jobs[1].oom_failed and jobs[1].oom_restarts == 0
    assert summ["oom_missed"] == 1 and summ["oom_jobs_left_failed"] == 1 and summ["oom_jobs_retried"] == 0
    assert summ["oom_missed_lost_gpu_h"] > 0 and summ["oom_missed_lost_gpu_h"] == summ["oom_lost_gpu_h"]
    assert summ["oom_missed_work_gpu_h"] >= summ["oom_missed_lost_gpu_h"]  # the whole run, not only the attempt


def test_seen_through_its_output_it_is_retried_as_on_a_report():
    specs = [job(0, 0, 100_000), jumping(1, 10, 10_000, mem1=12 * G, at=0.5)]
    summ, jobs = run(specs, oom_output_share=1.0)
    assert jobs[1].oom_restarts == 1 and not jobs[1].oom_failed
    assert summ["oom_retried_on_output"] == 1 and summ["oom_missed"] == 0


def test_an_unseen_linear_grower_is_still_caught_by_the_measurement_at_its_limit():
    summ, jobs = run([job(0, 0, 100_000), job(1, 10, 10_000, mem1=60 * G)], oom_unseen_share=1.0)
    assert jobs[1].oom_restarts == 2 and summ["oom_missed"] == 0


def test_the_draw_is_per_job_and_fixed_and_bad_shares_are_refused():
    import pytest

    from simulator.memory import SEEN_OUTPUT, SEEN_REPORT, UNSEEN, oom_seen

    draws = [oom_seen(i, 1, 0.3, 0.2) for i in range(10_000)]
    assert draws == [oom_seen(i, 1, 0.3, 0.2) for i in range(10_000)]
    assert abs(draws.count(UNSEEN) / 10_000 - 0.2) < 0.02 and abs(draws.count(SEEN_OUTPUT) / 10_000 - 0.3) < 0.02
    assert oom_seen(5, 2, 0.0, 1.0) == SEEN_REPORT  # a multi-GPU job: not modelled as silent
    for bad in ((0.7, 0.4), (-0.1, 0.0), (0.0, 1.5)):
        with pytest.raises(ValueError):
            oom_seen(0, 1, *bad)


# -- a retry on the job's word goes back at its own place (SimConfig.oom_word_own_place) -----------

def test_a_requeue_at_its_own_place_goes_back_by_arrival_behind_older_waiting_jobs():
    from simulator.events import EventLoop
    from simulator.scheduling import Scheduler
    from simulator.state import Job

    jobs = {i: Job(job(i, float(i), 100.0), PROFILES[0]) for i in range(6)}
    sched = Scheduler(cfg=SimConfig(policy="colocate", gpus=1), loop=EventLoop(), idle={}, releases=None,
                      shares=None)  # a queue only: no pass runs here
    for i in (0, 1, 3, 5):  # 2 and 4 were backfilled and run
        sched.arrive(jobs[i], float(i))
    sched.requeue(jobs[2], 50.0, at_head=False)  # its word: not eligible before Slurm's requeue delay
    assert [j.id for j in sched.waiting()] == [0, 1, 3, 5]
    sched.eligible(jobs[2], 51.0)
    sched.requeue(jobs[4], 52.0)  # measured: at the head
    sched.eligible(jobs[4], 53.0)
    assert [j.id for j in sched.waiting()] == [4, 0, 1, 2, 3, 5]
    assert sched.own_place == set()


def test_own_place_changes_only_the_jobs_word_and_keeps_fast_and_slow_passes_identical():
    from simulator.workload import TraceJob

    trace = [TraceJob(float(i * 30), 3_000.0 + (i % 7) * 700, 1 + (i % 9 == 0)) for i in range(120)]
    specs = build_jobs(trace, PROFILES, seed=5, growing_fraction=0.5, jump_fraction=0.7)
    cfg = dict(policy="colocate", gpus=4, known_history=True, oom_output_share=0.5)
    base = simulate(SimConfig(**cfg), specs, PROFILES, PAIRS)
    runs = {fast: simulate(SimConfig(**cfg, oom_word_own_place=True, fast=fast), specs, PROFILES, PAIRS)
            for fast in (True, False)}
    meta = {"sim_wall_s": 0, "sim_passes": 0, "sim_passes_skipped": 0}
    assert summary(runs[True]) | meta == summary(runs[False]) | meta  # the fast path's skips hold here too
    assert [(j.id, j.start, j.end) for j in runs[True].jobs] == [(j.id, j.start, j.end) for j in runs[False].jobs]
    own, plain = summary(runs[True]), summary(base)
    assert own["oom_jobs_retried"] > 0 and plain["oom_jobs_retried"] > 0 and own["jobs"] == plain["jobs"]
    assert [(j.id, j.start) for j in runs[True].jobs] != [(j.id, j.start) for j in base.jobs]  # it took effect
    # where every retry rests on a measurement at the share's limit (no job's word), nothing changes
    unseen = {**cfg, "oom_output_share": 0.0, "oom_unseen_share": 1.0}
    a = simulate(SimConfig(**unseen), specs, PROFILES, PAIRS)
    b = simulate(SimConfig(**unseen, oom_word_own_place=True), specs, PROFILES, PAIRS)
    assert summary(a)["oom_jobs_retried"] > 0
    assert [(j.id, j.start, j.end) for j in a.jobs] == [(j.id, j.start, j.end) for j in b.jobs]
