"""The steering watch on its own: a pending packed job is kept off the node where a workload it
must never share a GPU with runs (the exclusion written into its record, so a restarted helper
knows it is ours), the user's own exclusions kept; when the partner ends, ours is lifted and the
user's stays; a stale node is avoided by packed jobs; observe mode changes nothing."""
from __future__ import annotations

from slurm_plugin.helper.watches.steering import SteerWatch
from slurm_plugin.slurm.fake import FAKE_EPOCH
from tests.unit.helper.rounds_support import make, running
from tests.unit.helper.watches.watch_support import context, events

E = float(FAKE_EPOCH)


def partners(tmp_path, mode="enforce"):
    fake, helper, _, monitor = make(tmp_path, mode, fixed_clock=True)
    helper.store.pairs.avoid_pair("aaaa", "bbbb", "slowed each other")
    running(fake, 1, fp="aaaa", node="node2")
    fake.submit(job_id=3, state="PENDING", gres="gres:shard:2", admin_comment="gpupack: packed shard:2 fp=bbbb",
                excluded_nodes="node9")
    fake.submit(job_id=4, state="PENDING", gres="gres:shard:2", admin_comment="gpupack: packed shard:2 fp=cccc")
    return fake, helper, monitor


def test_a_pending_packed_job_is_kept_off_its_partners_node_and_lifted_when_the_partner_ends(tmp_path):
    fake, helper, monitor = partners(tmp_path)
    watch = SteerWatch()
    watch.round(context(monitor))
    assert set(fake.jobs[3].excluded_nodes.split(",")) == {"node2", "node9"}
    assert fake.jobs[3].admin_comment.endswith("fp=bbbb avoid=node2")
    assert fake.jobs[4].excluded_nodes == ""  # no partner runs anywhere
    (event,) = events(helper, "steer")
    assert event.job_id == 3 and event.data["excluded"] == ["node2"]
    fake.jobs[1].state = "COMPLETED"
    watch.round(context(monitor))
    assert fake.jobs[3].excluded_nodes == "node9" and "avoid=" not in fake.jobs[3].admin_comment


def test_a_packed_job_is_kept_off_a_stale_node(tmp_path):
    fake, helper, _, monitor = make(tmp_path, fixed_clock=True)
    fake.submit(job_id=4, state="PENDING", gres="gres:shard:2", admin_comment="gpupack: packed shard:2 fp=cccc")
    ctx = context(monitor)
    ctx.stale_nodes = {"node1": "its agent does not answer"}
    SteerWatch().round(ctx)
    assert fake.jobs[4].excluded_nodes == "node1"
    assert "stale" in events(helper, "steer")[0].detail


def test_observe_mode_changes_nothing(tmp_path):
    fake, helper, monitor = partners(tmp_path, mode="observe")
    SteerWatch().round(context(monitor))
    assert fake.jobs[3].excluded_nodes == "node9" and events(helper, "steer") == []
