"""The queue-layout watch on its own: in enforce mode, with `[monitor] mig_layout` on, every node
agent is told the pending packed jobs' shares, head first; a change the agent made is an event;
the same queue is not sent again within `LAYOUT_REFRESH_S`; a stale node is skipped; observe mode
and `mig_layout = "off"` send nothing."""
from __future__ import annotations

from slurm_plugin.helper.watches.layouts import LAYOUT_REFRESH_S, QueueLayoutWatch
from slurm_plugin.slurm.fake import FAKE_EPOCH
from tests.unit.helper.rounds_support import make
from tests.unit.helper.watches.watch_support import RecordingLink, context, events

E = float(FAKE_EPOCH)
CHANGE = {"gpu": 0, "op": "create", "profile": "2g.20gb", "start": 0}


def queue(fake):
    fake.submit(job_id=5, state="PENDING", gres="gres:shard:2", priority=100,
                admin_comment="gpupack: packed shard:2 fp=a")
    fake.submit(job_id=6, state="PENDING", gres="gres:shard:3", priority=900,
                admin_comment="gpupack: packed shard:3 fp=b")
    fake.submit(job_id=7, state="PENDING", gres="gres:gpu:1", priority=5000)  # whole GPU: no slice


def test_each_agent_is_told_the_queues_shares_head_first_and_a_change_is_an_event(tmp_path):
    fake, helper, _, monitor = make(tmp_path, fixed_clock=True, mig_layout="by-size")
    queue(fake)
    ctx = context(monitor, E)
    ctx.agents = link = RecordingLink(answer={"status": "ok", "changes": [CHANGE]})
    watch = QueueLayoutWatch()
    watch.round(ctx)
    assert [(node, op) for node, op, _ in link.calls] == [("node1", "layout"), ("node2", "layout")]
    assert all(req["pending_shards"] == [3, 2] and req["policy"] == "by-size" for _, _, req in link.calls)
    assert all(req["pending_jobs"] == [6, 5] for _, _, req in link.calls)  # whose, in the same order
    said = events(helper, "mig-reconfigure")  # newest first
    assert sorted(e.data["node"] for e in said) == ["node1", "node2"]
    assert all("GPU 0 create 2g.20gb@0" in e.detail for e in said)
    watch.round(context(monitor, E + LAYOUT_REFRESH_S - 1))  # the same queue, soon after: not sent again
    assert len(link.calls) == 2
    later = context(monitor, E + LAYOUT_REFRESH_S + 1)
    later.agents = link
    watch.round(later)  # re-sent, in case an agent lost it
    assert len(link.calls) == 4


def test_a_stale_node_is_skipped(tmp_path):
    fake, helper, _, monitor = make(tmp_path, fixed_clock=True, mig_layout="by-size")
    queue(fake)
    ctx = context(monitor, E)
    ctx.agents, ctx.stale_nodes = (link := RecordingLink()), {"node2": "its agent does not answer"}
    QueueLayoutWatch().round(ctx)
    assert [node for node, _, _ in link.calls] == ["node1"]


def test_observe_mode_or_layouts_off_send_nothing(tmp_path):
    for mode, policy in (("observe", "by-size"), ("enforce", "off")):
        fake, helper, _, monitor = make(tmp_path / mode, mode, fixed_clock=True, mig_layout=policy)
        queue(fake)
        ctx = context(monitor, E)
        ctx.agents = link = RecordingLink()
        QueueLayoutWatch().round(ctx)
        assert link.calls == [] and events(helper, "mig-reconfigure") == []
