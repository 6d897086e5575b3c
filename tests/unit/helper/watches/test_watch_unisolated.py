"""A packed job whose isolation failed is requeued at the head on the node's own record only.

The SPANK plugin, as root, records each packed step it did not let start in the node's spool; the
node's agent lists the records with its samples; the helper judges each against Slurm's view of the
job, requeues it at the head, says why in an event once per record, and acknowledges it (the
agent deletes it). A job that exits 117 by itself leaves no record: it is an ordinary failed job,
neither requeued nor lifted (issue 33, attack 2)."""
from __future__ import annotations

import pytest

from slurm_plugin.helper.watches.unisolated import KIND, UNISOLATED_EXIT, judge
from slurm_plugin.slurm.fake import FAKE_EPOCH
from slurm_plugin.slurm.model import GresItem, Job
from tests.unit.helper.rounds_support import make

START = FAKE_EPOCH + 100


def _events(helper, job_id):
    return [e for e in helper.store.events(job_id=job_id) if e.kind == KIND]


def _record(job_id, *, node="node1", at=START + 1.0, step=0xFFFFFFFB, key=None):
    return {"key": key or f"{job_id}.{step}.4242.json", "job_id": job_id, "step_id": step, "uid": 1000,
            "node": node, "at": at, "shards": 2, "reason": "cannot connect to the agent's socket"}


def _world(tmp_path, mode="enforce", release="22.05.8"):
    fake, helper, samples, monitor = make(tmp_path, mode=mode, fixed_clock=True, release=release)
    samples.unisolated = {}
    acked: list[tuple[str, list[str]]] = []
    monitor.unisolated_watch.ack = lambda link, node, keys: acked.append((node, list(keys)))
    return fake, helper, samples, monitor, acked


def _failed_packed(fake, job_id, *, node="node1", priority=900):
    fake.submit(job_id=job_id, state="FAILED", nodes=node, gres="gres:shard:2", priority=priority,
                gres_detail=["shard:h100:2(IDX:0)"], exit_code=UNISOLATED_EXIT, start_time=START,
                end_time=START + 2, admin_comment="gpupack: packed shard:2 fp=a")


def test_a_job_that_exits_117_by_itself_is_neither_requeued_nor_lifted(tmp_path):
    """Before: slurm.conf's RequeueExit=117 requeued it and the watch lifted any pending job whose
    last run exited 117 (a CPU-only job went from priority 900 to above a waiting 5000 job)."""
    fake, helper, samples, monitor, acked = _world(tmp_path)
    fake.submit(job_id=5, state="PENDING", priority=900, restart_cnt=1, exit_code=UNISOLATED_EXIT)  # CPU only
    _failed_packed(fake, 8)  # a packed job whose own program exited 117: no record on its node
    fake.submit(job_id=6, state="PENDING", gres="gres:shard:1", priority=5000)
    monitor.tick()
    monitor.tick()
    assert _events(helper, 5) == [] and _events(helper, 8) == []
    assert fake.jobs[5].priority == 900 and fake.jobs[8].state == "FAILED" and fake.jobs[8].restart_cnt == 0
    assert acked == []


def test_a_packed_step_root_recorded_is_requeued_at_the_head_and_acknowledged(tmp_path):
    fake, helper, samples, monitor, acked = _world(tmp_path)
    _failed_packed(fake, 5)
    fake.submit(job_id=6, state="PENDING", gres="gres:shard:1", priority=5000)
    samples.unisolated = {"node1": (_record(5),)}
    monitor.tick()
    (event,) = _events(helper, 5)
    assert "could not be isolated" in event.detail and "at the head of the queue" in event.detail
    assert event.data["exit_code"] == UNISOLATED_EXIT and event.data["node"] == "node1"
    assert fake.jobs[5].state == "PENDING" and fake.jobs[5].restart_cnt == 1
    assert fake.jobs[5].priority > fake.jobs[6].priority  # the next to start
    assert acked == [("node1", ["5.4294967291.4242.json"])]
    monitor.tick()  # the agent lists it once more (the acknowledgement was lost): acknowledged, not acted on
    assert len(_events(helper, 5)) == 1 and fake.jobs[5].restart_cnt == 1
    assert acked[-1] == ("node1", ["5.4294967291.4242.json"])


@pytest.mark.parametrize("release", ["23.11.10", "24.11.1"])
def test_a_failed_job_squeue_no_longer_lists_is_asked_for(tmp_path, release):
    """23.11+ lists no finished job in the round's listing: the watch asks Slurm for the job."""
    fake, helper, samples, monitor, acked = _world(tmp_path, release=release)
    listing = monitor.runner.jobs_in_play  # as squeue --json honours its filters there: no finished job
    monitor.runner.jobs_in_play = lambda also=(): [j for j in listing(also) if j.state != "FAILED"]
    _failed_packed(fake, 5)
    samples.unisolated = {"node1": (_record(5),)}
    monitor.tick()
    assert len(_events(helper, 5)) == 1 and fake.jobs[5].state == "PENDING" and fake.jobs[5].restart_cnt == 1


def test_a_record_slurm_does_not_back_is_dropped(tmp_path):
    """A record is root's word that a packed step did not start; Slurm's view must agree: the job
    holds shards, ran on that node, in the run the record was written in."""
    fake, helper, samples, monitor, acked = _world(tmp_path)
    fake.submit(job_id=5, state="FAILED", nodes="node1", priority=900, exit_code=UNISOLATED_EXIT,
                start_time=START)  # no shards
    _failed_packed(fake, 6, node="node2")
    _failed_packed(fake, 7)
    samples.unisolated = {"node1": (_record(5), _record(6), _record(7, at=START - 600), _record(8),
                                    _record(9, node="node3"))}
    monitor.tick()
    for job in (5, 6, 7):
        assert _events(helper, job) == [] and fake.jobs[job].state == "FAILED" and fake.jobs[job].restart_cnt == 0
    assert sorted(acked[0][1]) == sorted(r["key"] for r in samples.unisolated["node1"])


def test_the_kill_switch_keeps_the_record_for_later(tmp_path):
    fake, helper, samples, monitor, acked = _world(tmp_path)
    _failed_packed(fake, 5)
    samples.unisolated = {"node1": (_record(5),)}
    helper.paths.kill_switch.touch()
    monitor.tick()
    assert _events(helper, 5) == [] and acked == [] and fake.jobs[5].state == "FAILED"
    helper.paths.kill_switch.unlink()
    monitor.tick()
    assert len(_events(helper, 5)) == 1 and fake.jobs[5].state == "PENDING" and acked


def test_observe_mode_only_says_why(tmp_path):
    fake, helper, samples, monitor, acked = _world(tmp_path, mode="observe")
    _failed_packed(fake, 5)
    samples.unisolated = {"node1": (_record(5),)}
    monitor.tick()
    (event,) = _events(helper, 5)
    assert "could not be isolated" in event.detail and event.detail.startswith("would requeue")
    assert fake.jobs[5].priority == 900 and fake.jobs[5].state == "FAILED"


def test_judge_is_pure():
    packed = Job(5, state="RUNNING", nodes="node[1-2]", gres_detail=(GresItem("shard", None, 2, (0,)),))
    assert judge(_record(5, node="node2"), "node2", packed).act == "requeue"
    assert judge(_record(5, node="node2"), "node1", packed).act == "drop"  # another node's agent sent it
    assert judge(_record(5, node="node3"), "node3", packed).act == "drop"  # the job does not run there
    assert judge(_record(5), "node1", Job(5, state="RUNNING", nodes="node1")).act == "drop"  # not packed
    assert judge(_record(5), "node1", None).act == "drop"
    assert judge({"job_id": "x"}, "node1", packed).act == "drop"
    pending = Job(5, state="PENDING", gres=(GresItem("shard", None, 2, None),))
    assert judge(_record(5), "node1", pending).act == "lift"


def test_a_record_waits_while_slurm_does_not_answer_and_a_forgotten_job_is_said_lost(tmp_path):
    """slurmctld busy: no verdict, the record stays on the node (before: dropped and acknowledged, so
    the job was never requeued). Slurm forgot the job (the agent was down past MinJobAge): it cannot be
    requeued; the record is dropped and an event tells why the job failed."""
    from slurm_plugin.helper.watches.unisolated import LOST_KIND
    from slurm_plugin.slurm.errors import SlurmTimeoutError

    fake, helper, samples, monitor, acked = _world(tmp_path, release="23.11.10")
    listing = monitor.runner.jobs_in_play  # 23.11+: the listing has no finished job, each is asked for
    monitor.runner.jobs_in_play = lambda also=(): [j for j in listing(also) if j.state != "FAILED"]
    _failed_packed(fake, 5)
    samples.unisolated = {"node1": (_record(5), _record(8))}  # Slurm never had (or forgot) job 8
    asked = monitor.runner.job

    def busy(job_id):
        raise SlurmTimeoutError(["scontrol", "show", "job", str(job_id)], None)

    monitor.runner.job = busy
    monitor.tick()
    assert acked == [] and _events(helper, 5) == [] and fake.jobs[5].state == "FAILED"
    monitor.runner.job = asked
    monitor.tick()
    assert len(_events(helper, 5)) == 1 and fake.jobs[5].state == "PENDING"
    assert sorted(acked[0][1]) == sorted(r["key"] for r in samples.unisolated["node1"])
    (lost,) = [e for e in helper.store.events(job_id=8) if e.kind == LOST_KIND]
    assert "no longer knows the job" in lost.detail and lost.data["node"] == "node1"
    assert not [e for e in helper.store.events(job_id=5) if e.kind == LOST_KIND]
