"""A packed job whose isolation failed: Slurm requeued it (RequeueExit of
the SPANK plugin's exit code); the helper says why in an event, once per run, and makes it the
next to start. Other pending jobs, a job requeued for another reason, and the same requeue seen
again in a later round are left alone."""
from __future__ import annotations

from slurm_plugin.helper.watches.unisolated import KIND, UNISOLATED_EXIT
from tests.unit.helper.rounds_support import make


def _events(helper, job_id):
    return [e for e in helper.store.events(job_id=job_id) if e.kind == KIND]


def test_a_requeued_unisolated_packed_job_is_explained_and_put_at_the_head(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, fixed_clock=True)
    fake.submit(job_id=5, state="PENDING", gres="gres:shard:2", priority=900, restart_cnt=1,
                exit_code=UNISOLATED_EXIT, admin_comment="gpupack: packed shard:2 fp=a")
    fake.submit(job_id=6, state="PENDING", gres="gres:shard:1", priority=5000)  # never ran
    fake.submit(job_id=7, state="PENDING", gres="gres:shard:1", priority=800, restart_cnt=1, exit_code=1)
    monitor.tick()
    (event,) = _events(helper, 5)
    assert "could not be isolated" in event.detail and "at the head of the queue" in event.detail
    assert fake.jobs[5].priority > fake.jobs[6].priority  # the next to start
    assert _events(helper, 6) == [] and _events(helper, 7) == [] and fake.jobs[7].priority == 800
    monitor.tick()
    assert len(_events(helper, 5)) == 1  # once per run
    fake.jobs[5].restart_cnt = 2  # it failed again on its next start: a new event
    monitor.tick()
    assert len(_events(helper, 5)) == 2


def test_observe_mode_only_says_why(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="observe", fixed_clock=True)
    fake.submit(job_id=5, state="PENDING", gres="gres:shard:2", priority=900, restart_cnt=1,
                exit_code=UNISOLATED_EXIT)
    monitor.tick()
    (event,) = _events(helper, 5)
    assert "could not be isolated" in event.detail and "head" not in event.detail
    assert fake.jobs[5].priority == 900
