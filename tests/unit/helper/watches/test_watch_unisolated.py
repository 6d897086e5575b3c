"""The unisolated watch on its own: a packed job Slurm requeued because its step could not be
isolated is told why once per run and lifted to the head (the keep-at-head watch keeps it
there); with the kill switch on it is only told why."""
from __future__ import annotations

from slurm_plugin.helper.watches.unisolated import KIND, UNISOLATED_EXIT, UnisolatedWatch, requeued_unisolated
from tests.unit.helper.rounds_support import make
from tests.unit.helper.watches.watch_support import context, events


def requeued(fake, job_id: int, restart_cnt: int = 1, exit_code: int = UNISOLATED_EXIT) -> None:
    fake.submit(job_id=job_id, state="PENDING", gres="gres:shard:2", priority=900, restart_cnt=restart_cnt,
                exit_code=exit_code)


def test_only_a_pending_job_requeued_on_the_spank_plugins_exit_is_one(tmp_path):
    fake, _, _, monitor = make(tmp_path, fixed_clock=True)
    requeued(fake, 5)
    requeued(fake, 6, exit_code=1)  # failed for another reason
    requeued(fake, 7, restart_cnt=0)  # never requeued
    fake.submit(job_id=8, state="RUNNING", restart_cnt=1, exit_code=UNISOLATED_EXIT)  # started again
    jobs = context(monitor).jobs
    assert [j for j in sorted(jobs) if requeued_unisolated(jobs[j])] == [5]


def test_it_is_told_once_per_run_and_lifted_to_the_head(tmp_path):
    fake, helper, _, monitor = make(tmp_path, fixed_clock=True)
    requeued(fake, 5)
    fake.submit(job_id=6, state="PENDING", gres="gres:shard:1", priority=5000)
    watch = UnisolatedWatch()
    watch.round(context(monitor))
    (event,) = events(helper, KIND)
    assert event.job_id == 5 and "at the head of the queue" in event.detail
    assert fake.jobs[5].priority > fake.jobs[6].priority and 5 in monitor.state.heading
    assert watch.told == {(5, 1)}
    watch.round(context(monitor))
    assert len(events(helper, KIND)) == 1
    fake.jobs[5].restart_cnt = 2  # it could not be isolated on its next start either
    watch.round(context(monitor))
    assert len(events(helper, KIND)) == 2 and watch.told == {(5, 1), (5, 2)}


def test_with_the_kill_switch_on_it_is_only_told_why(tmp_path):
    fake, helper, _, monitor = make(tmp_path, fixed_clock=True)
    requeued(fake, 5)
    fake.submit(job_id=6, state="PENDING", gres="gres:shard:1", priority=5000)
    ctx = context(monitor)
    ctx.actions.halted = True
    UnisolatedWatch().round(ctx)
    (event,) = events(helper, KIND)
    assert "head" not in event.detail and fake.jobs[5].priority == 900 and monitor.state.heading == {}
