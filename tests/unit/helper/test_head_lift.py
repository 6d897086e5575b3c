"""A requeued job's head-of-queue lift ends when it starts.

The lift is an administrator nice, never a fixed priority: `scontrol update Priority=N` is a
priority Slurm never computes again (the fake models slurmctld's `direct_set_prio`), which
would outrank fair-share for good, even after a later requeue by Slurm itself."""
from __future__ import annotations

import pytest

from packer.preemption import Lift
from slurm_plugin.slurm.fake import FAKE_EPOCH

from tests.unit.helper import rounds_support
from tests.unit.helper.rounds_support import running


def requeue_at_head(monitor, job_id):
    (job,) = monitor.actions.runner.jobs([job_id])
    assert monitor.actions.requeue_at_head(job, "restart-memory", "test")


def start(fake, job_id):
    job = fake.jobs[job_id]
    job.state, job.state_reason, job.nodes, job.start_time = "RUNNING", "None", "node1", FAKE_EPOCH + 60


@pytest.mark.parametrize("release", ["22.05.8", "24.11.5"])
def test_under_basic_the_lift_puts_the_job_first_and_ends_when_it_starts(tmp_path, release):
    fake, helper, samples, monitor = rounds_support.make(tmp_path, fixed_clock=True, release=release)
    running(fake, 7, fp="big")
    fake.submit(job_id=5, state="PENDING", priority=4294901700)  # submitted long before: above 7
    fake.jobs[7].priority = 4294901000
    monitor.tick()
    requeue_at_head(monitor, 7)
    job = fake.jobs[7]
    assert job.priority > fake.jobs[5].priority and job.nice < 0  # the next job to start
    assert not job.direct_set  # no priority Slurm would never compute again
    monitor.tick()  # kept there, not lifted further
    assert job.priority == fake.jobs[5].priority + 1
    start(fake, 7)
    monitor.tick()
    assert job.nice == 0 and job.priority == 4294901000  # its own priority again
    assert not monitor.state.heading


def test_under_multifactor_the_lift_follows_fair_share_and_ends_when_it_starts(tmp_path):
    """multifactor computes priorities on its period: the lift has it computed at once (a
    hold and a release), and after the start the computed priority is the job's own again."""
    fake, helper, samples, monitor = rounds_support.make(tmp_path, fixed_clock=True, priority_type="multifactor")
    running(fake, 7, fp="big")
    fake.jobs[7].factors = 100  # its account has used much: low fair-share
    fake.submit(job_id=5, state="PENDING", priority=500)  # a light user's job
    monitor.tick()
    requeue_at_head(monitor, 7)
    job = fake.jobs[7]
    assert job.priority == 501 and not job.direct_set
    fake.recompute_priorities()  # Slurm's own pass keeps the lift: it is part of what it computes
    assert job.priority == 501
    fake.jobs[5].factors = 800  # fair-share moved the other job up
    fake.recompute_priorities()
    monitor.tick()
    assert job.priority == 801  # lifted again above it
    start(fake, 7)
    monitor.tick()
    fake.recompute_priorities()
    assert job.nice == 0 and job.priority == 100  # fair-share decides again
    fake.jobs[7].state = "PENDING"  # requeued by Slurm (a node failure): no lift left over
    fake.recompute_priorities()
    assert job.priority < fake.jobs[5].priority


def test_the_owners_own_nice_is_what_comes_back(tmp_path):
    fake, helper, samples, monitor = rounds_support.make(tmp_path, fixed_clock=True, priority_type="multifactor")
    running(fake, 7, fp="big")
    fake.jobs[7].factors, fake.jobs[7].nice = 300, 50  # the user asked for less (`sbatch --nice=50`)
    fake.submit(job_id=5, state="PENDING", priority=500)
    monitor.tick()
    requeue_at_head(monitor, 7)
    assert fake.jobs[7].priority == 501
    start(fake, 7)
    monitor.tick()
    assert fake.jobs[7].nice == 50


def test_a_helper_restarted_between_the_lift_and_the_start_still_ends_the_lift(tmp_path):
    """The lift is kept in the store: a watcher started anew (its memory gone) reloads it and
    puts the owner's nice back when the job starts; the store's row goes with it."""
    fake, helper, samples, monitor = rounds_support.make(tmp_path, fixed_clock=True, priority_type="multifactor")
    running(fake, 7, fp="big")
    fake.jobs[7].factors, fake.jobs[7].nice = 300, 50
    fake.submit(job_id=5, state="PENDING", priority=500)
    monitor.tick()
    requeue_at_head(monitor, 7)
    assert fake.jobs[7].priority == 501 and fake.jobs[7].nice < 50
    _, _, _, restarted = rounds_support.make(tmp_path, fixed_clock=True, priority_type="multifactor")
    restarted.runner = monitor.runner  # the same Slurm; the same database file, read anew
    assert dict(restarted.state.heading) == {7: Lift(50, fake.jobs[7].nice, 1)}
    start(fake, 7)
    restarted.tick()
    assert fake.jobs[7].nice == 50  # the owner's own nice: the lift ended
    assert not restarted.state.heading
    assert not helper.store.db.execute("select * from head_lifts").fetchall()


def test_a_job_started_and_requeued_again_while_no_helper_watched_loses_its_lift(tmp_path):
    """The restart count kept with the lift says the job ran since: a requeue by Slurm itself
    (a node failure) while the helper was down keeps no lift."""
    fake, helper, samples, monitor = rounds_support.make(tmp_path, fixed_clock=True, priority_type="multifactor")
    running(fake, 7, fp="big")
    fake.jobs[7].factors = 300
    fake.submit(job_id=5, state="PENDING", priority=500)
    monitor.tick()
    requeue_at_head(monitor, 7)
    assert fake.jobs[7].nice < 0
    start(fake, 7)  # the helper is down meanwhile: it never sees the run
    job = fake.jobs[7]
    job.state, job.state_reason, job.restart_cnt = "PENDING", "BeginTime", job.restart_cnt + 1
    _, _, _, restarted = rounds_support.make(tmp_path, fixed_clock=True, priority_type="multifactor")
    restarted.runner = monitor.runner
    restarted.tick()
    fake.recompute_priorities()
    assert job.nice == 0 and job.priority < fake.jobs[5].priority  # fair-share decides again
    assert not restarted.state.heading
