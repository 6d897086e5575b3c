"""Decided again at dispatch: the watcher gives a pending packed job whose
turn comes with a whole GPU idle that GPU back (its request restored before it starts)."""
from __future__ import annotations

from packer.action_modes import ACTION_KINDS
from packer.comment import parse
from tests.unit.helper import rounds_support

BUSY = "gpu:h100:2(IDX:0-1),shard:h100:0(IDX:N/A)"


def make(tmp_path, release="23.11.4", mode="enforce", **settings):
    fake, helper, _, monitor = rounds_support.make(tmp_path, mode, fixed_clock=True, release=release, **settings)
    for node in fake.nodes.values():
        node.gres_used = BUSY
    return fake, helper, monitor


def pending_packed(fake, job_id, priority=100, shards=2):
    fake.submit(job_id=job_id, state="PENDING", gres=f"gres:shard:h100:{shards}", priority=priority,
                admin_comment=f"gpupack: packed shard:{shards} fp=f{job_id}")


def events(helper, job_id):
    return [e for e in helper.store.events(job_id=job_id) if e.kind.startswith("restore-whole")]


def test_a_packed_job_at_its_turn_gets_the_idle_gpu_back(tmp_path):
    fake, helper, monitor = make(tmp_path)
    assert "restore-whole" in ACTION_KINDS
    pending_packed(fake, 5)
    monitor.tick()
    assert fake.jobs[5].tres_per_node == "gres:shard:h100:2" and not events(helper, 5)  # no GPU idle
    fake.nodes["node2"].gres_used = "gpu:h100:1(IDX:0),shard:h100:0(IDX:N/A)"  # node2's GPU 1 is free
    monitor.tick()
    assert fake.jobs[5].tres_per_node.endswith("gpu:h100:1")
    record = parse(fake.jobs[5].admin_comment)
    assert (record.verdict, record.reason, record.fingerprint) == ("exclusive", "whole-gpu-at-dispatch", "f5")
    (event,) = events(helper, 5)
    assert "node2" in event.detail and event.data["to"] == "gpu:h100:1"
    monitor.tick()
    assert len(events(helper, 5)) == 1  # once


def test_an_admin_who_packs_with_gpus_idle_keeps_the_packs(tmp_path):
    from packer.config import PackerConfig

    fake, helper, monitor = make(tmp_path)
    helper._config = PackerConfig(mode="enforce", pack_only_when_no_idle_gpu=False)
    pending_packed(fake, 5)
    fake.nodes["node2"].gres_used = "gpu:h100:1(IDX:0),shard:h100:0(IDX:N/A)"
    monitor.tick()
    assert fake.jobs[5].tres_per_node == "gres:shard:h100:2" and not events(helper, 5)


def test_jobs_ahead_come_first_and_22_05_gets_every_share_of_the_gpu(tmp_path):
    fake, helper, monitor = make(tmp_path, release="22.05.8")
    fake.submit(job_id=1, state="PENDING", gres="gres:gpu:h100:1", priority=300)
    pending_packed(fake, 2, priority=200)
    fake.nodes["node2"].gres_used = "gpu:h100:0(IDX:N/A),shard:h100:0(IDX:N/A)"  # two idle GPUs
    monitor.tick()
    assert fake.jobs[1].tres_per_node == "gres:gpu:h100:1"
    assert fake.jobs[2].tres_per_node == "gres:shard:h100:8"  # 22.05: all the GPU's shares


def test_packed_jobs_that_outnumber_the_idle_gpus_stay_on_their_shares(tmp_path):
    fake, helper, monitor = make(tmp_path)
    pending_packed(fake, 2, priority=200)
    pending_packed(fake, 3, priority=100)
    fake.nodes["node2"].gres_used = "gpu:h100:1(IDX:0),shard:h100:0(IDX:N/A)"  # one idle GPU for two
    monitor.tick()
    assert fake.jobs[2].tres_per_node == fake.jobs[3].tres_per_node == "gres:shard:h100:2"
    assert not events(helper, 2) and not events(helper, 3)


def test_shadow_mode_and_the_kill_switch_leave_the_job_alone(tmp_path):
    fake, helper, monitor = make(tmp_path, actions={"restore-whole": "shadow"})
    pending_packed(fake, 5)
    fake.nodes["node2"].gres_used = "gpu:h100:1(IDX:0),shard:h100:0(IDX:N/A)"
    monitor.tick()
    assert fake.jobs[5].tres_per_node == "gres:shard:h100:2"
    (event,) = events(helper, 5)
    assert event.data["shadow"] is True and "would give" in event.detail
    fake2, helper2, monitor2 = make(tmp_path / "halted")
    helper2.paths.kill_switch.write_text("")
    pending_packed(fake2, 5)
    fake2.nodes["node2"].gres_used = "gpu:h100:1(IDX:0),shard:h100:0(IDX:N/A)"
    monitor2.tick()
    assert fake2.jobs[5].tres_per_node == "gres:shard:h100:2" and not events(helper2, 5)


def test_a_requeued_job_is_left_to_what_requeued_it(tmp_path):
    fake, helper, monitor = make(tmp_path)
    fake.submit(job_id=5, state="PENDING", gres="gres:shard:h100:2", priority=100, restart_cnt=1,
                admin_comment="gpupack: packed shard:2 reason=memory-restart fp=f5")
    fake.nodes["node2"].gres_used = "gpu:h100:1(IDX:0),shard:h100:0(IDX:N/A)"
    monitor.tick()
    assert fake.jobs[5].tres_per_node == "gres:shard:h100:2" and not events(helper, 5)


def test_a_job_seen_running_or_resized_by_a_watch_is_not_at_a_first_turn(tmp_path):
    fake, helper, monitor = make(tmp_path)
    fake.submit(job_id=5, state="RUNNING", nodes="node1", gres="gres:shard:h100:2", priority=100,
                gres_detail=["shard:h100:2(IDX:0)"], admin_comment="gpupack: packed shard:2 fp=f5")
    fake.submit(job_id=6, state="PENDING", gres="gres:shard:h100:4", priority=90,
                admin_comment="gpupack: packed shard:4 reason=memory-restart fp=f6")
    monitor.tick()
    fake.jobs[5].state = "PENDING"  # requeued by someone (no restart count in the listing)
    fake.nodes["node2"].gres_used = "gpu:h100:0(IDX:N/A),shard:h100:0(IDX:N/A)"
    monitor.tick()
    assert fake.jobs[5].tres_per_node == "gres:shard:h100:2" and not events(helper, 5)
    assert fake.jobs[6].tres_per_node == "gres:shard:h100:4" and not events(helper, 6)
