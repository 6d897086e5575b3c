"""The Slurm 22.05 guard on its own: where it runs, and one GPU given whole to one job and as
shares to another, the job that came last requeued at the head and kept off that node."""
from __future__ import annotations

import pytest

from slurm_plugin.helper.watches.quirk_guard import QuirkGuardWatch
from slurm_plugin.slurm.fake import FAKE_EPOCH
from tests.unit.helper.rounds_support import make, running
from tests.unit.helper.watches.watch_support import context, events


@pytest.mark.parametrize("release, setting, on", [
    ("22.05.8", "auto", True), ("23.11.5", "auto", False), ("23.11.5", True, True), ("22.05.8", False, False),
])
def test_it_runs_where_slurm_needs_it_or_as_configured(tmp_path, release, setting, on):
    _, _, _, monitor = make(tmp_path, release=release, quirk_guard=setting)
    assert QuirkGuardWatch().enabled(context(monitor)) is on


def test_the_job_that_came_last_on_a_gpu_given_twice_is_requeued_and_kept_off_the_node(tmp_path):
    fake, helper, _, monitor = make(tmp_path, quirk_guard=True)
    fake.submit(job_id=1, state="RUNNING", nodes="node1", gres="gres:gpu:1", gres_detail=["gpu:h100:1(IDX:0)"],
                start_time=FAKE_EPOCH)
    running(fake, 2, fp="b", start=FAKE_EPOCH + 60, gpu=0)  # shards of the same GPU, later
    running(fake, 3, fp="c", start=FAKE_EPOCH + 90, gpu=1)  # another GPU: left alone
    ctx = context(monitor, FAKE_EPOCH + 120)
    QuirkGuardWatch().round(ctx)
    assert ctx.acted == {2}
    assert monitor.state.quirk_excluded == {2: ("node1", frozenset({1}))}
    assert [e.job_id for e in events(helper, "requeue-quirk")] == [2]
    assert fake.jobs[2].state == "PENDING" and "node1" in fake.jobs[2].excluded_nodes
    assert fake.jobs[1].state == fake.jobs[3].state == "RUNNING"


def test_a_guard_switched_off_requeues_nothing(tmp_path):
    fake, helper, _, monitor = make(tmp_path, quirk_guard=False)
    fake.submit(job_id=1, state="RUNNING", nodes="node1", gres="gres:gpu:1", gres_detail=["gpu:h100:1(IDX:0)"])
    running(fake, 2, fp="b", start=FAKE_EPOCH + 60, gpu=0)
    QuirkGuardWatch().round(context(monitor, FAKE_EPOCH + 120))
    assert fake.jobs[2].state == "RUNNING" and events(helper, "requeue-quirk") == []
