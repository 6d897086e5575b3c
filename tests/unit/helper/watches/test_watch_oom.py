"""The out-of-memory watch on its own: an end a node agent holds for a packed job is decided once
(requeued on a size that holds it, remembered for its workload) and the agent is answered each
round it still lists the end; an end the watch cannot read is passed over, the others still
decided; shadow mode records what it would do and leaves the job as it is."""
from __future__ import annotations

from packer.oom_restart import KIND
from slurm_plugin.helper.watches.oom import OomWatch
from slurm_plugin.slurm.fake import FAKE_EPOCH
from tests.unit.helper.rounds_support import GIB, make, running
from tests.unit.helper.test_oom_rounds import oom_end
from tests.unit.helper.watches.watch_support import RecordingLink, context, events


def world(tmp_path, mode="enforce"):
    fake, helper, _, monitor = make(tmp_path, mode, fixed_clock=True)
    running(fake, 7, fp="jump", shards=1)
    ctx = context(monitor, FAKE_EPOCH + 6)
    ctx.agents = link = RecordingLink(answer={"status": "ok", "known": True})
    return fake, helper, monitor, ctx, link


def test_an_end_is_decided_once_and_its_agent_answered_each_time_it_lists_it(tmp_path):
    fake, helper, monitor, ctx, link = world(tmp_path)
    watch = OomWatch(lambda: {"node1": [oom_end()]})
    watch.round(ctx)
    job = fake.jobs[7]
    assert job.state == "PENDING" and job.tres_per_node == "gres:shard:2"  # 5 GiB held + 10 asked: 15 GiB
    assert helper.store.remembered_size("jump") == 2
    (event,) = events(helper, KIND)
    assert event.job_id == 7 and event.data["need_bytes"] == 15 * GIB
    watch.round(ctx)  # the agent lists it again (it has not seen the answer)
    assert len(events(helper, KIND)) == 1 and fake.jobs[7].restart_cnt == 1
    settles = [(node, req["job_id"]) for node, op, req in link.calls if op == "oom_settle"]
    assert settles == [("node1", 7), ("node1", 7)]
    assert link.calls[0][2]["outcome"] == link.calls[1][2]["outcome"]


def test_an_end_that_cannot_be_read_is_passed_over_and_the_others_decided(tmp_path, caplog):
    """Before: a job id that is not a number raised out of the round (every later watch of the
    round skipped, each round the agent listed it)."""
    fake, helper, monitor, ctx, link = world(tmp_path)
    OomWatch(lambda: {"node1": [{"job_id": "seven", "at": 1.0}, oom_end()]}).round(ctx)
    assert "cannot be read" in caplog.text
    assert fake.jobs[7].state == "PENDING" and [e.job_id for e in events(helper, KIND)] == [7]
    assert [req["job_id"] for _, op, req in link.calls if op == "oom_settle"] == [7]


def test_shadow_mode_records_and_leaves_the_job(tmp_path):
    fake, helper, monitor, ctx, link = world(tmp_path, mode="observe")
    OomWatch(lambda: {"node1": [oom_end()]}).round(ctx)
    assert fake.jobs[7].state == "RUNNING" and fake.jobs[7].tres_per_node == "gres:shard:1"
    (event,) = events(helper, KIND)
    assert event.data.get("shadow") is True
