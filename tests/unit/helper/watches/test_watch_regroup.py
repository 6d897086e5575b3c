"""The regroup watch on its own: a whole-GPU head of the queue that has waited `regroup_head_wait_s`
while the room it needs exists in pieces gets a plan; the movable packed job is signalled to
checkpoint, then requeued away from the freed node once its grace time is over; a head that has not
waited long enough, or with no movable job, gets no move."""
from __future__ import annotations

from slurm_plugin.helper.watches.regroup import RegroupWatch
from slurm_plugin.slurm.fake import FAKE_EPOCH
from tests.unit.helper.rounds_support import make
from tests.unit.helper.test_regroup_rounds import events, fragmented
from tests.unit.helper.watches.watch_support import context

E = float(FAKE_EPOCH)


def test_the_movable_job_is_signalled_then_requeued_away_from_the_freed_node(tmp_path):
    fake, helper, _, monitor = make(tmp_path, fixed_clock=True, regroup_head_wait_s=10)
    fragmented(fake)  # node1: job 1 (movable, GPU 0), GPU 1 idle; node2 full; job 10 wants 2 GPUs
    watch = RegroupWatch()
    watch.round(context(monitor, E + 40))
    assert fake.signals == [(1, "USR1", True)] and fake.jobs[1].state == "RUNNING"  # 30 s to checkpoint
    plan = events(helper, "regroup-plan")[0]
    assert plan.job_id == 10 and plan.data["moves"] == [1] and plan.data["frees"] == "node1:0,node1:1"
    assert 10 in watch.heads
    watch.round(context(monitor, E + 55))
    assert fake.jobs[1].state == "RUNNING"  # still in its grace time
    ctx = context(monitor, E + 71)
    watch.round(ctx)
    moved = fake.jobs[1]
    assert moved.state == "PENDING" and moved.excluded_nodes == "node1" and moved.priority > 0
    assert 1 in ctx.acted
    assert [e.kind for e in events(helper)] == ["regroup-plan", "regroup-signal", "regroup-requeue"]


def test_a_head_that_has_not_waited_long_enough_gets_no_move(tmp_path):
    fake, helper, _, monitor = make(tmp_path, fixed_clock=True, regroup_head_wait_s=10)
    fragmented(fake)
    RegroupWatch().round(context(monitor, E + 5))
    assert fake.signals == [] and events(helper) == []


def test_with_no_movable_job_nothing_moves_and_the_skip_is_said(tmp_path):
    fake, helper, _, monitor = make(tmp_path, fixed_clock=True, regroup_head_wait_s=10)
    fragmented(fake, movable=False)
    RegroupWatch().round(context(monitor, E + 40))
    assert fake.signals == [] and fake.jobs[1].state == "RUNNING"
    assert [e.kind for e in events(helper)] == ["regroup-skip"]
