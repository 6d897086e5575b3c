"""The keep-at-head watch on its own: a requeued job stays above every pending job, its lift
ends (its owner's nice back) when it starts, and a finished job's lift is forgotten."""
from __future__ import annotations

from packer.preemption import Lift
from slurm_plugin.helper.watches.at_head import KeepAtHeadWatch
from slurm_plugin.slurm.fake import FAKE_EPOCH
from tests.unit.helper.rounds_support import make
from tests.unit.helper.watches.watch_support import context


def test_a_lifted_job_stays_above_every_pending_job(tmp_path):
    fake, _, _, monitor = make(tmp_path)
    fake.submit(job_id=1, state="PENDING", priority=100, restart_cnt=1)
    fake.submit(job_id=2, state="PENDING", priority=500)
    monitor.state.heading[1] = Lift(own_nice=0, nice=0, restart_cnt=1)
    KeepAtHeadWatch().round(context(monitor))
    assert fake.jobs[1].nice < 0 and monitor.state.heading[1].nice == fake.jobs[1].nice
    assert monitor.runner.job(1).priority > monitor.runner.job(2).priority
    assert monitor.state.heading[1].own_nice == 0


def test_a_job_requeued_this_round_is_left_for_the_next(tmp_path):
    fake, _, _, monitor = make(tmp_path)
    fake.submit(job_id=1, state="PENDING", priority=100, restart_cnt=1)
    fake.submit(job_id=2, state="PENDING", priority=500)
    monitor.state.heading[1] = Lift(own_nice=0, nice=0, restart_cnt=1)
    ctx = context(monitor)
    ctx.acted.add(1)
    KeepAtHeadWatch().round(ctx)
    assert fake.jobs[1].nice == 0


def test_a_started_job_gets_its_owners_nice_back_and_a_finished_one_is_forgotten(tmp_path):
    fake, _, _, monitor = make(tmp_path)
    fake.submit(job_id=1, state="RUNNING", nice=-400, start_time=FAKE_EPOCH)
    fake.submit(job_id=2, state="COMPLETED", nice=-300, start_time=FAKE_EPOCH, end_time=FAKE_EPOCH + 5)
    fake.submit(job_id=3, state="PENDING", priority=0, nice=-200, restart_cnt=1)  # held: waits
    heading = monitor.state.heading
    heading[1] = Lift(own_nice=10, nice=-400, restart_cnt=1)
    heading[2] = Lift(own_nice=10, nice=-300, restart_cnt=1)
    heading[3] = Lift(own_nice=10, nice=-200, restart_cnt=1)
    KeepAtHeadWatch().round(context(monitor, FAKE_EPOCH + 10))
    assert fake.jobs[1].nice == 10 and 1 not in heading
    assert fake.jobs[2].nice == -300 and 2 not in heading  # Slurm changes a finished job no more
    assert fake.jobs[3].nice == -200 and heading[3].nice == -200
