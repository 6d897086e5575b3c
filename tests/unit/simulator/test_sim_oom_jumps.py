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
