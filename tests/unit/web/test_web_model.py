"""The main page's model: slices from Slurm's allocation and the agents' isolation, the queue."""
from __future__ import annotations

from datetime import datetime, timezone

from packer.gres import GresItem
from slurm_plugin.slurm.model import Job, Node
from slurm_plugin.web.model import EventRow, assemble
from slurm_plugin.web.slices import AgentJob, Slice, lay_out

MIG_SLICES = {"1g.10gb": 1, "1g.20gb": 2, "3g.40gb": 4, "7g.80gb": 8}.get
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def node(name: str, gpus: int = 2, state: tuple[str, ...] = ("MIXED",)) -> Node:
    return Node(name, state, (GresItem("gpu", "h100", gpus), GresItem("shard", "h100", 8 * gpus)))


def running(job_id: int, host: str, detail: GresItem, comment: str = "", name: str = "train") -> Job:
    return Job(job_id, name, "alice", "RUNNING", nodes=host, gres_detail=(detail,), admin_comment=comment,
               gres=(GresItem(detail.name, None, detail.count),), start_time=T0, submit_time=T0)


def build(nodes, jobs, agents=(), events=(), **kw):
    return assemble(nodes, jobs, agents, events, taken_at=1.0, shares_per_gpu=8, profile_slices=MIG_SLICES, **kw)


def test_whole_gpu_job_makes_its_gpu_exclusive_and_the_other_stays_idle():
    ov = build([node("node1")], [running(5, "node1", GresItem("gpu", "h100", 1, indexes=(1,)),
                                         "gpupack: exclusive reason=no-history fp=ab")])
    (n,) = ov.nodes
    assert [g.mode for g in n.gpus] == ["idle", "exclusive"]
    (s,) = n.gpus[1].slices
    assert (s.job_id, s.kind, s.start, s.size) == (5, "whole", 0, 8)
    assert ov.running_by_decision == {"exclusive": 1}
    assert ov.running[0].reason == "no-history"


def test_mig_slices_sit_at_their_placement_and_mps_shares_fill_the_gaps():
    jobs = [
        running(1, "node1", GresItem("shard", "h100", 1, indexes=(0,)), "gpupack: packed shard:1 est=3.0GiB src=history(2) fp=a"),
        running(2, "node1", GresItem("shard", "h100", 2, indexes=(0,)), "gpupack: packed shard:2 est=13GiB src=history(1) fp=b"),
        running(3, "node2", GresItem("shard", "h100", 4, indexes=(1,))),
        running(4, "node2", GresItem("shard", "h100", 2, indexes=(1,))),
    ]
    agents = [AgentJob(1, "node1", 0, "mig:1g.10gb@6"), AgentJob(2, "node1", 0, "mig:1g.20gb@0"),
              AgentJob(3, "node2", 1, "mps:50"), AgentJob(4, "node2", 1, "mps:25")]
    ov = build([node("node1"), node("node2")], jobs, agents)
    gpu0 = ov.nodes[0].gpus[0]
    assert gpu0.mode == "packed"
    placed = {s.job_id: (s.kind, s.label, s.start, s.size, s.placed) for s in gpu0.slices}
    assert placed == {1: ("mig", "1g.10gb", 6.0, 1.0, True), 2: ("mig", "1g.20gb", 0.0, 2.0, True)}
    mps = {s.job_id: (s.label, s.start, s.size) for s in ov.nodes[1].gpus[1].slices}
    assert mps == {3: ("50%", 0.0, 4.0), 4: ("25%", 4.0, 2.0)}
    # a packed job's reason is what its size came from
    assert ov.running[0].reason == "est=3.0GiB src=history(2)"


def test_shards_without_an_agent_are_counted_from_slurm_and_drawn_where_free():
    jobs = [running(7, "node1", GresItem("shard", "h100", 3, indexes=(0,))),
            running(8, "node1", GresItem("shard", "h100", 2, indexes=(0,)))]
    (gpu0, gpu1) = build([node("node1")], jobs).nodes[0].gpus
    assert [(s.job_id, s.label, s.start, s.placed) for s in gpu0.slices] == [(7, "shard:3", 0.0, False), (8, "shard:2", 3.0, False)]
    assert gpu0.used == 5 and gpu1.mode == "idle"


def test_lay_out_puts_a_floating_slice_in_the_first_gap_that_holds_it():
    fixed = [Slice(1, "mig", "1g.10gb", 0, 1), Slice(2, "mig", "3g.40gb", 4, 4)]
    floating = [Slice(3, "shard", "shard:2", 0, 2, placed=False), Slice(4, "shard", "shard:1", 0, 1, placed=False)]
    starts = {s.job_id: s.start for s in lay_out(fixed + floating, 8)}
    assert starts == {1: 0, 2: 4, 3: 1, 4: 3}


def test_a_job_slurm_says_ended_is_not_drawn_even_if_its_agent_still_lists_it():
    done = Job(9, "x", "bob", "COMPLETED", nodes="node1")
    ov = build([node("node1")], [done], [AgentJob(9, "node1", 0, "mig:1g.10gb@0")])
    assert all(g.mode == "idle" for g in ov.nodes[0].gpus)
    assert ov.running_total == 0 and ov.pending_total == 0


def test_pending_jobs_in_queue_order_with_counts_by_decision_and_reason_beyond_the_cut():
    jobs = [Job(i, f"j{i}", "carol", "PENDING", state_reason="Resources", priority=100 + (i % 3), submit_time=T0,
                admin_comment="gpupack: exclusive reason=no-history fp=1" if i % 2 else "gpupack: packed shard:1 est=2GiB fp=2")
            for i in range(1, 11)]
    ov = build([node("node1")], jobs, max_rows=4)
    assert ov.pending_total == 10 and len(ov.pending) == 4
    priorities = [r.priority for r in ov.pending]
    assert priorities == sorted(priorities, reverse=True)
    counts = {(d, r): n for d, r, n in ov.pending_by_reason}
    assert counts == {("exclusive", "no-history"): 5, ("packed", "est=2GiB"): 5}


def test_nodes_in_natural_order_and_unusable_ones_marked():
    ov = build([node("node10"), node("node2", state=("IDLE", "DRAIN")), node("node1")], [])
    assert [n.name for n in ov.nodes] == ["node1", "node2", "node10"]
    assert [n.usable for n in ov.nodes] == [True, False, True]
    assert ov.nodes[1].state == "IDLE+DRAIN"


def test_events_and_problems_pass_through():
    ev = EventRow(2.0, 3, "requeue-contention", "lost 30%")
    ov = build([node("node1")], [], events=[ev], problems=["node agent of node1 does not answer"])
    assert ov.events == (ev,) and ov.problems == ("node agent of node1 does not answer",)


def test_idle_mig_instances_are_drawn_but_leave_the_gpu_idle_and_floating_shares_avoid_them():
    from slurm_plugin.web.slices import IdleInstance

    idle = [IdleInstance("node1", 0, "1g.10gb", 6, 1), IdleInstance("node1", 0, "1g.20gb", 0, 2),
            IdleInstance("node1", 1, "1g.10gb", 0, 1)]
    jobs = [running(3, "node1", GresItem("gpu", "h100", 1, indexes=(1,)))]
    ov = build([node("node1")], jobs, idle=idle)
    gpu0, gpu1 = ov.nodes[0].gpus
    assert gpu0.mode == "idle" and gpu0.used == 0
    assert sorted((s.kind, s.label, s.start) for s in gpu0.slices) == [("idle", "1g.10gb", 6.0), ("idle", "1g.20gb", 0.0)]
    assert [s.kind for s in gpu1.slices] == ["whole"]  # a GPU held whole has no idle instance to show
    ov = build([node("node1")], [running(4, "node1", GresItem("shard", "h100", 2, indexes=(0,)))], idle=idle[1:2])
    (shard,) = ov.nodes[0].gpus[0].jobs
    assert shard.start == 2.0 and ov.nodes[0].gpus[0].mode == "packed"
