"""The monitor's OOM watch over a fake Slurm: an out-of-memory end an agent holds is requeued
on a size that holds it (at the head when the node measured it at its limit, at its own place
on the job's word), in shadow mode only recorded, with the kill switch on left alone, and past
its retries left FAILED with the reason."""
from __future__ import annotations

from packer.action_modes import ACTION_KINDS
from slurm_plugin.slurm.fake import FAKE_EPOCH
from tests.unit.helper.rounds_support import GIB, make, running

LIMIT = 9984 * 1024**2  # a 1g.10gb slice


def oom_end(job_id: int = 7, at: float = FAKE_EPOCH + 5) -> dict:
    return {"job_id": job_id, "node": "node1", "gpu_index": 0, "isolation": "mig:1g.10gb@0", "shards": 1,
            "step_id": 0xFFFFFFFB, "exit_code": 1, "limit_bytes": LIMIT, "peak_bytes": 5 * GIB,
            "asked_bytes": 10 * GIB, "held_bytes": 5 * GIB, "at": at, "reason": "test",
            "started_at": FAKE_EPOCH, "settled": None}


def world(tmp_path, mode="enforce", **settings):
    fake, helper, samples, monitor = make(tmp_path, mode, fixed_clock=True, **settings)
    running(fake, 7, fp="jump", shards=1)
    samples.oom_ends = {"node1": [oom_end()]}
    return fake, helper, samples, monitor


def kinds(helper) -> list[str]:
    return [e.kind for e in helper.store.events()]


def test_restart_oom_is_an_action_with_a_mode():
    assert "restart-oom" in ACTION_KINDS


def event_priority(helper) -> int:
    (event,) = [e for e in helper.store.events() if e.kind == "restart-oom"]
    return event.data["priority"]


def waiting(fake, job_id=8, priority=5000):
    """A job that waited in the queue before the OOM end (the running job 7 has priority 1000)."""
    fake.jobs[7].priority = 1000
    fake.submit(job_id=job_id, state="PENDING", gres="gres:shard:1", priority=priority)


def test_an_oom_end_on_the_jobs_word_is_requeued_on_the_size_that_holds_it_at_its_own_place(tmp_path):
    """The job's report of the failed allocation (what it held measured at 5 GiB, nowhere near
    its 10 GiB limit) earns a retry on a share that holds it, never a lift above a job that
    waited longer (issue 33)."""
    fake, helper, samples, monitor = world(tmp_path)
    waiting(fake)
    monitor.tick()
    job = fake.jobs[7]
    assert job.state == "PENDING" and job.tres_per_node == "gres:shard:2" and job.priority > 0
    assert job.priority < fake.jobs[8].priority and event_priority(helper) < fake.jobs[8].priority
    assert "restart-oom" in job.admin_comment
    (event,) = [e for e in helper.store.events() if e.kind == "restart-oom"]
    assert event.data["from_shards"] == 1 and event.data["asked_bytes"] == 10 * GIB
    assert event.data["lower_bound_bytes"] == 5 * GIB and event.data["need_bytes"] == 15 * GIB
    assert event.data["evidence_kind"] == "reported" and event.data["at_head"] is False
    assert "at its own place in the queue" in event.detail
    assert helper.store.remembered_size("jump") == 2
    monitor.tick()  # the agent still lists it (it has not seen the answer): decided once
    assert kinds(helper).count("restart-oom") == 1


def test_an_oom_end_the_node_measured_at_the_limit_is_requeued_at_the_head(tmp_path):
    fake, helper, samples, monitor = world(tmp_path)
    waiting(fake)
    samples.oom_ends = {"node1": [{**oom_end(), "peak_bytes": LIMIT, "asked_bytes": None, "held_bytes": None}]}
    monitor.tick()
    job = fake.jobs[7]
    assert job.state == "PENDING" and job.tres_per_node == "gres:shard:2"
    (event,) = [e for e in helper.store.events() if e.kind == "restart-oom"]
    assert event.data["evidence_kind"] == "measured" and event.data["at_head"] is True
    assert event.data["priority"] > fake.jobs[8].priority


def test_an_oom_text_in_the_output_is_the_jobs_word(tmp_path):
    """A framework's text found in the job's output (what an echo could print as well): a
    capped retry at its own place; a text that names no size asks for the next size up."""
    fake, helper, samples, monitor = world(tmp_path)
    waiting(fake)
    said = {**oom_end(), "asked_bytes": None, "held_bytes": None, "peak_bytes": 0, "said_oom": True,
            "seen_in": "output:cuda:cublas", "said_line": "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED"}
    samples.oom_ends = {"node1": [said]}
    monitor.tick()
    job = fake.jobs[7]
    assert job.state == "PENDING" and job.tres_per_node == "gres:shard:2" and job.priority < fake.jobs[8].priority
    (event,) = [e for e in helper.store.events() if e.kind == "restart-oom"]
    assert event.data["evidence_kind"] == "reported" and event.data["seen_in"] == "output:cuda:cublas"
    assert "CUBLAS_STATUS_ALLOC_FAILED" in event.data["said_line"]


def test_an_end_with_an_unknown_evidence_is_not_read(tmp_path):
    fake, helper, samples, monitor = world(tmp_path)
    samples.oom_ends = {"node1": [{**oom_end(), "evidence": "trust-me"}]}
    monitor.tick()
    assert fake.jobs[7].state == "RUNNING" and "restart-oom" not in kinds(helper)


def test_in_shadow_mode_it_is_only_recorded(tmp_path):
    fake, helper, samples, monitor = world(tmp_path, mode="observe")
    monitor.tick()
    assert fake.jobs[7].state == "RUNNING" and fake.jobs[7].tres_per_node == "gres:shard:1"
    (event,) = [e for e in helper.store.events() if e.kind == "restart-oom"]
    assert event.data.get("shadow") is True and helper.store.remembered_size("jump") is None


def test_with_the_kill_switch_on_nothing_is_requeued(tmp_path):
    fake, helper, samples, monitor = world(tmp_path)
    helper.paths.kill_switch.write_text("")
    monitor.tick()
    assert fake.jobs[7].state == "RUNNING" and "restart-oom" not in kinds(helper)


def test_past_its_retries_it_is_left_failed_with_the_reason(tmp_path):
    fake, helper, samples, monitor = world(tmp_path, oom_retries_per_job=1)
    helper.store.log_event("restart-oom", "an earlier requeue", 7, fingerprint="jump")
    monitor.tick()
    assert fake.jobs[7].state == "RUNNING"  # not requeued again (the agent lets its end through)
    (left,) = [e for e in helper.store.events() if e.kind == "restart-oom-left"]
    assert "left FAILED" in left.detail and "limit 1 per job" in left.detail
    assert "oom-left" in fake.jobs[7].admin_comment


def test_an_unsure_forecast_of_its_curve_does_not_size_it_a_sure_one_does(tmp_path):
    from types import SimpleNamespace

    for warned, shards in ((False, "gres:shard:2"), (True, "gres:shard:4")):
        fake, helper, samples, monitor = make(tmp_path / str(warned), fixed_clock=True)
        running(fake, 7, fp="jump", shards=1)
        samples.put(7, FAKE_EPOCH + 1, mem=5 * GIB, isolation="mig:1g.10gb@0")
        monitor.tick()  # its track
        last = SimpleNamespace(warn=warned, predicted_peak_bytes=(9000 if not warned else 33) * GIB)
        monitor.state.tracks[7].forecaster = SimpleNamespace(last=last)
        samples.oom_ends = {"node1": [oom_end()]}
        monitor.tick()
        assert fake.jobs[7].tres_per_node == shards


def test_a_job_slurm_already_marked_failed_is_requeued_while_slurmctld_holds_it(tmp_path):
    """The agent's hold ran out before the helper answered (it was down): Slurm has it FAILED."""
    fake, helper, samples, monitor = world(tmp_path)
    fake.jobs[7].state = "FAILED"
    monitor.tick()
    job = fake.jobs[7]
    assert job.state == "PENDING" and job.tres_per_node == "gres:shard:2" and job.priority > 0
    (event,) = [e for e in helper.store.events() if e.kind == "restart-oom"]
    assert event.data["slurm_state"] == "FAILED"


def test_the_decision_is_judged_right_once_the_requeued_run_completes(tmp_path):
    fake, helper, samples, monitor = world(tmp_path)
    monitor.tick()
    samples.oom_ends = {}
    monitor.tick()  # back in the queue: not judged yet
    assert [r.outcome for r in monitor.actions.ledger.rows() if r.action == "restart-oom"] == [None]
    fake.jobs[7].state = "COMPLETED"
    monitor.tick()
    (row,) = [r for r in monitor.actions.ledger.rows() if r.action == "restart-oom"]
    assert row.mode == "enforce" and row.outcome == "right"


def test_an_end_on_the_jobs_own_report_is_retried_at_its_own_place_never_lifted(tmp_path):
    """Issue 33: what a job says of itself (alloc_failed: its memory 5 GiB of a 10 GiB share, an
    allocation of 10 GiB failed) earns a retry at its own place in the queue, never a lift above
    a job that waited longer. Before: requeued at the head, above the waiting 5000 job."""
    fake, helper, samples, monitor = world(tmp_path)
    fake.jobs[7].priority = 900
    fake.submit(job_id=8, state="PENDING", gres="gres:shard:1", priority=5000)
    monitor.tick()
    job = fake.jobs[7]
    assert job.state == "PENDING" and job.tres_per_node == "gres:shard:2"
    assert job.priority < fake.jobs[8].priority and 7 not in monitor.state.heading
    (event,) = [e for e in helper.store.events() if e.kind == "restart-oom"]
    assert "its own place" in event.detail and "at the head" not in event.detail and event.data["at_head"] is False
    assert event.data["priority"] < 5000  # what Slurm gave it, below the job that waited longer


def test_an_end_the_node_measured_at_the_share_keeps_its_head_requeue(tmp_path):
    """The node's own measurement (its peak at the share's limit, from the GPU's accounting) shows
    the suite's fence stopped it: back at the head."""
    fake, helper, samples, monitor = world(tmp_path)
    samples.oom_ends = {"node1": [{**oom_end(), "peak_bytes": LIMIT, "asked_bytes": None, "held_bytes": None}]}
    fake.jobs[7].priority = 900
    fake.submit(job_id=8, state="PENDING", gres="gres:shard:1", priority=5000)
    monitor.tick()
    (event,) = [e for e in helper.store.events() if e.kind == "restart-oom"]
    assert fake.jobs[7].state == "PENDING" and "at the head" in event.detail and event.data["priority"] > 5000
