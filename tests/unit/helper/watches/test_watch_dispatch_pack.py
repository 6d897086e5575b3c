"""The pack-at-dispatch watch on its own: a pending job made exclusive at submit because a GPU was
idle then is packed, once, when no whole GPU is idle and its history fits a share; while a GPU is
idle, or when it was made exclusive for another reason, or its history fits no share, it stays
whole; shadow mode only says what it would do."""
from __future__ import annotations

from packer.comment import parse
from slurm_plugin.helper.watches.dispatch_pack import KIND, PackAtDispatchWatch
from store.db import RunRecord
from tests.unit.helper.rounds_support import GIB, make
from tests.unit.helper.watches.watch_support import context, events

BUSY = "gpu:h100:2(IDX:0-1),shard:h100:0(IDX:N/A)"
ONE_IDLE = "gpu:h100:1(IDX:0),shard:h100:0(IDX:N/A)"


def cluster(tmp_path, **settings):
    fake, helper, _, monitor = make(tmp_path, fixed_clock=True, release="23.11.4", **settings)
    for node in fake.nodes.values():
        node.gres_used = BUSY
    return fake, helper, monitor


def exclusive_for_idle(fake, helper, job_id, peak_gib=7.6, reason="idle-gpu"):
    fake.submit(job_id=job_id, state="PENDING", gres="gres:gpu:1", priority=100,
                admin_comment=f"gpupack: exclusive reason={reason} fp=f{job_id}")
    helper.store.record_run(RunRecord(job_id=900000 + job_id, fingerprint=f"f{job_id}",
                                      peak_mem_bytes=int(peak_gib * GIB), mean_util_pct=30.0))


def test_with_no_gpu_idle_it_is_packed_once_on_the_share_its_history_needs(tmp_path):
    fake, helper, monitor = cluster(tmp_path)
    exclusive_for_idle(fake, helper, 5)
    fake.nodes["node2"].gres_used = ONE_IDLE
    watch = PackAtDispatchWatch()
    watch.round(context(monitor))
    assert fake.jobs[5].tres_per_node == "gres:gpu:1" and events(helper, KIND) == []  # a GPU is idle
    fake.nodes["node2"].gres_used = BUSY
    watch.round(context(monitor))
    assert fake.jobs[5].tres_per_node.endswith("shard:1")
    record = parse(fake.jobs[5].admin_comment)
    assert (record.verdict, record.shards, record.reason) == ("packed", 1, "packed-at-dispatch")
    watch.round(context(monitor))
    assert [e.job_id for e in events(helper, KIND)] == [5]


def test_a_job_too_large_for_a_share_or_exclusive_for_another_reason_stays_whole(tmp_path):
    fake, helper, monitor = cluster(tmp_path)
    exclusive_for_idle(fake, helper, 5, peak_gib=78)
    exclusive_for_idle(fake, helper, 6, reason="high-util")
    PackAtDispatchWatch().round(context(monitor))
    assert fake.jobs[5].tres_per_node == fake.jobs[6].tres_per_node == "gres:gpu:1"
    assert events(helper, KIND) == []


def test_shadow_mode_only_says_it(tmp_path):
    fake, helper, monitor = cluster(tmp_path, actions={KIND: "shadow"})
    exclusive_for_idle(fake, helper, 5)
    PackAtDispatchWatch().round(context(monitor))
    assert fake.jobs[5].tres_per_node == "gres:gpu:1"
    (event,) = events(helper, KIND)
    assert event.data["shadow"] is True and "would pack" in event.detail
