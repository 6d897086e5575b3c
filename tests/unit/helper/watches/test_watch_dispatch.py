"""The dispatch watch on its own: a packed job's first turn with a whole GPU idle gets the GPU
back, once; a job that already ran (requeued, sized by what requeued it) or one lifted at the
head is not decided again; in shadow mode it only says so."""
from __future__ import annotations

from packer.preemption import Lift
from slurm_plugin.helper.watches.dispatch import KIND, DispatchWatch
from tests.unit.helper.rounds_support import make
from tests.unit.helper.watches.watch_support import context, events

ONE_IDLE = "gpu:h100:1(IDX:0),shard:h100:0(IDX:N/A)"  # GPU 1 of the node free
BUSY = "gpu:h100:2(IDX:0-1),shard:h100:0(IDX:N/A)"


def cluster(tmp_path, mode="enforce"):
    fake, helper, _, monitor = make(tmp_path, mode, fixed_clock=True, release="23.11.4")
    for name, node in fake.nodes.items():
        node.gres_used = ONE_IDLE if name == "node2" else BUSY
    return fake, helper, monitor


def pending_packed(fake, job_id, **kw):
    fake.submit(job_id=job_id, state="PENDING", gres="gres:shard:h100:2", priority=100,
                admin_comment=f"gpupack: packed shard:2 fp=f{job_id}", **kw)


def test_a_first_turn_with_a_gpu_idle_gets_it_back_once(tmp_path):
    fake, helper, monitor = cluster(tmp_path)
    pending_packed(fake, 5)
    watch = DispatchWatch()
    watch.round(context(monitor))
    assert fake.jobs[5].tres_per_node.endswith("gpu:h100:1")
    assert [e.job_id for e in events(helper, KIND)] == [5] and watch.done == {5}
    watch.round(context(monitor))
    assert len(events(helper, KIND)) == 1


def test_a_job_that_ran_or_is_kept_at_the_head_is_not_decided_again(tmp_path):
    fake, helper, monitor = cluster(tmp_path)
    pending_packed(fake, 5, restart_cnt=1)  # requeued: what requeued it sized it
    pending_packed(fake, 6)
    monitor.state.heading[6] = Lift(own_nice=0, nice=-10)  # lifted at the head by a watch
    DispatchWatch().round(context(monitor))
    assert fake.jobs[5].tres_per_node == fake.jobs[6].tres_per_node == "gres:shard:h100:2"
    assert events(helper, KIND) == []


def test_shadow_mode_only_says_what_it_would_do(tmp_path):
    fake, helper, monitor = cluster(tmp_path)
    monitor.actions.modes = {KIND: "shadow"}  # [monitor.actions] restore-whole
    pending_packed(fake, 5)
    DispatchWatch().round(context(monitor))
    assert fake.jobs[5].tres_per_node == "gres:shard:h100:2"
    (event,) = events(helper, KIND)
    assert event.data["shadow"] is True and "would give it its whole GPU back" in event.detail
