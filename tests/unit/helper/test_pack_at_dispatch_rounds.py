"""Decided again at dispatch, the other way: a job made exclusive at submit because a GPU was idle
then is packed when its turn comes with none idle and its history fits a share."""
from __future__ import annotations

from packer.action_modes import ACTION_KINDS
from packer.comment import parse
from store.db import RunRecord

from tests.unit.helper.test_dispatch_rounds import BUSY, make

GIB = 1024**3
IDLE_ONE = "gpu:h100:1(IDX:0),shard:h100:0(IDX:N/A)"


def exclusive_for_idle(fake, helper, job_id, peak_gib=7.6, priority=100, reason="idle-gpu"):
    fake.submit(job_id=job_id, state="PENDING", gres="gres:gpu:1", priority=priority,
                admin_comment=f"gpupack: exclusive reason={reason} fp=f{job_id}")
    helper.store.record_run(RunRecord(job_id=900000 + job_id, fingerprint=f"f{job_id}",
                                      peak_mem_bytes=int(peak_gib * GIB), mean_util_pct=30.0))


def events(helper, job_id):
    return [e for e in helper.store.events(job_id=job_id) if e.kind.startswith("pack-at-dispatch")]


def test_with_no_gpu_idle_at_its_turn_it_is_packed_once(tmp_path):
    fake, helper, monitor = make(tmp_path)
    assert "pack-at-dispatch" in ACTION_KINDS
    fake.nodes["node2"].gres_used = IDLE_ONE
    exclusive_for_idle(fake, helper, 5)
    monitor.tick()
    assert fake.jobs[5].tres_per_node == "gres:gpu:1" and not events(helper, 5)  # a GPU is idle: it takes it
    fake.nodes["node2"].gres_used = BUSY
    monitor.tick()
    assert fake.jobs[5].tres_per_node.endswith("shard:1")
    record = parse(fake.jobs[5].admin_comment)
    assert (record.verdict, record.shards, record.reason, record.fingerprint) == (
        "packed", 1, "packed-at-dispatch", "f5")
    (event,) = events(helper, 5)
    assert event.kind == "pack-at-dispatch" and "no whole GPU idle" in event.detail and event.data["shards"] == 1
    monitor.tick()
    assert len(events(helper, 5)) == 1


def test_a_job_its_history_does_not_fit_or_exclusive_for_another_reason_stays_whole(tmp_path):
    fake, helper, monitor = make(tmp_path)
    exclusive_for_idle(fake, helper, 5, peak_gib=78)  # too large for any share
    exclusive_for_idle(fake, helper, 6, reason="high-util")
    monitor.tick()
    assert fake.jobs[5].tres_per_node == fake.jobs[6].tres_per_node == "gres:gpu:1"
    assert not events(helper, 5) and not events(helper, 6)


def test_shadow_mode_only_says_it(tmp_path):
    fake, helper, monitor = make(tmp_path, actions={"pack-at-dispatch": "shadow"})
    exclusive_for_idle(fake, helper, 5)
    monitor.tick()
    assert fake.jobs[5].tres_per_node == "gres:gpu:1"
    (event,) = events(helper, 5)
    assert event.data["shadow"] is True and "would pack" in event.detail


def test_22_05_cannot_change_the_request_and_says_so(tmp_path):
    fake, helper, monitor = make(tmp_path, release="22.05.8")
    exclusive_for_idle(fake, helper, 5)
    monitor.tick()
    assert fake.jobs[5].tres_per_node == "gres:gpu:1"
    assert parse(fake.jobs[5].admin_comment).verdict == "exclusive"
    (event,) = events(helper, 5)
    assert event.kind == "pack-at-dispatch-unsupported" and "waits for a whole GPU" in event.detail


def test_a_requeued_job_is_left_alone(tmp_path):
    fake, helper, monitor = make(tmp_path)
    exclusive_for_idle(fake, helper, 5)
    fake.jobs[5].restart_cnt = 1
    monitor.tick()
    assert fake.jobs[5].tres_per_node == "gres:gpu:1" and not events(helper, 5)


def test_the_kill_switch_stops_it(tmp_path):
    fake, helper, monitor = make(tmp_path)
    helper.paths.kill_switch.write_text("")
    exclusive_for_idle(fake, helper, 5)
    monitor.tick()
    assert fake.jobs[5].tres_per_node == "gres:gpu:1" and not events(helper, 5)
