"""Grow by preemption through the monitor's rounds (stateful fake Slurm, scripted samples, a
real SQLite file): who is evicted, how the grower restarts, the events, the modes."""
from __future__ import annotations

import pytest

from store.ledger import ActionLedger
from packer.config import ConfigError
from slurm_plugin.helper.monitor_settings import MonitorSettings
from slurm_plugin.slurm.fake import FAKE_EPOCH

from tests.unit.helper.rounds_support import GIB, make, running

# PackerConfig defaults: 8 shares of 10 GiB per GPU, a packed job holds at most 7


def put(samples, job_id, t, mem, start, gpu=0):
    samples.put(job_id, FAKE_EPOCH + t, mem=int(mem), started_at=FAKE_EPOCH + start, gpu=gpu)


def three_on_one_gpu(fake):
    """Job 7 (shard:2, the oldest), job 8 (shard:4), job 9 (shard:2, the youngest): the GPU full."""
    running(fake, 7, fp="grow", shards=2, start=FAKE_EPOCH)
    running(fake, 8, fp="mid", shards=4, start=FAKE_EPOCH + 2)
    running(fake, 9, fp="young", shards=2, start=FAKE_EPOCH + 4)


def grow_until(fake, samples, monitor, stop, *, grower=7, rounds=60, rate=0.5 * GIB):
    """Job `grower` grows 4 GiB + `rate`/s from its start; its neighbours stay flat."""
    start = {7: 0, 8: 2, 9: 4}
    for t in range(4, rounds):
        for job_id in (7, 8, 9):
            if fake.jobs[job_id].state != "RUNNING":
                continue
            mem = 4 * GIB + (t - start[job_id]) * rate if job_id == grower else 3 * GIB
            put(samples, job_id, t, mem, start[job_id])
        monitor.tick()
        if stop():
            return t
    raise AssertionError("the stop condition never came")


def kinds(helper):
    return [e.kind for e in reversed(helper.store.events())]


def test_the_youngest_neighbour_is_evicted_and_the_grower_restarts_pinned_to_its_node(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", memory_horizon_s=60,
                                          grow_running_target="min")
    three_on_one_gpu(fake)
    grow_until(fake, samples, monitor, lambda: fake.jobs[7].state != "RUNNING")
    grower, mid, young = fake.jobs[7], fake.jobs[8], fake.jobs[9]
    assert mid.state == "RUNNING"  # older than the youngest: spared, and one eviction was enough
    assert young.state == "PENDING" and young.priority == 0  # held until the grower runs again
    assert grower.state == "PENDING" and grower.priority > 0 and grower.state_reason != "JobHeldUser"
    assert grower.excluded_nodes == "node2"  # pinned to its node, so to its GPU's node
    monitor.tick()  # a round while it waits: steering keeps the pin (it lifted it before)
    assert fake.jobs[7].state == "PENDING" and fake.jobs[7].excluded_nodes == "node2"
    shards = int(grower.tres_per_node.rpartition(":")[2])
    assert 3 <= shards <= 4  # the freed 2 shares and its own 2: never more than the GPU has room for
    assert helper.store.remembered_size("grow") == shards
    events = kinds(helper)
    assert events.index("grow-evict") < events.index("grow-restart")
    assert "restart-memory" not in events  # the memory watch left it to the grow watch
    evict = next(e for e in helper.store.events() if e.kind == "grow-evict")
    assert evict.job_id == 9 and "pair not recorded" in evict.detail and evict.data["grower"] == 7
    assert not helper.store.pairs.avoided_with("young") and not helper.store.pairs.avoided_with("grow")
    (row,) = ActionLedger(helper.store).rows("grow-preempt")
    assert row.mode == "enforce" and row.data["evicted"] == [9]

    # Slurm starts the grower again on its node: the held victim goes back, at the head
    samples.now.clear()
    grower.state, grower.nodes, grower.gres_detail = "RUNNING", "node1", [f"shard:h100:{shards}(IDX:0)"]
    grower.start_time = FAKE_EPOCH + 100
    monitor.tick()
    assert young.priority > 0 and young.state_reason != "JobHeldUser"
    release = next(e for e in helper.store.events() if e.kind == "grow-release")
    assert release.job_id == 9 and "runs again" in release.detail

    # the grown run passes its old share (2 shares, 20 GiB) and the victim starts again: right
    grower.start_time = FAKE_EPOCH + 100
    put(samples, 7, 101, 21 * GIB, 100)
    monitor.tick()
    assert ActionLedger(helper.store).rows("grow-preempt")[0].outcome is None  # job 9 still waits
    young.state, young.start_time = "RUNNING", FAKE_EPOCH + 102
    young.nodes, young.gres_detail = "node1", ["shard:h100:2(IDX:0)"]
    put(samples, 7, 102, 21 * GIB, 100)
    put(samples, 9, 102, 3 * GIB, 102)
    monitor.tick()
    (row,) = ActionLedger(helper.store).rows("grow-preempt")
    assert row.outcome == "right" and "past its old share of 20.0GiB" in row.outcome_detail


def test_maximum_target_evicts_more_but_never_an_older_job(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", memory_horizon_s=60,
                                          grow_running_target="max", grow_running_max_evictions=3)
    three_on_one_gpu(fake)
    grow_until(fake, samples, monitor, lambda: fake.jobs[7].state != "RUNNING", grower=7, rate=1.0 * GIB)
    evicted = [e.job_id for e in helper.store.events() if e.kind == "grow-evict"]
    assert evicted[0] == 9 if len(evicted) == 1 else sorted(evicted) == [8, 9]
    restart = next(e for e in helper.store.events() if e.kind == "grow-restart")
    # the maximum, capped at what a packed job may hold (7 of 8 shares)
    assert restart.data["to_shards"] == min(7, 2 + sum({8: 4, 9: 2}[j] for j in evicted))


def test_a_grower_with_only_older_neighbours_goes_through_the_queue(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", memory_horizon_s=60)
    three_on_one_gpu(fake)
    grow_until(fake, samples, monitor, lambda: fake.jobs[9].state != "RUNNING", grower=9)
    assert fake.jobs[7].state == fake.jobs[8].state == "RUNNING"  # older: never evicted
    events = kinds(helper)
    assert "grow-evict" not in events and "restart-memory" in events
    skip = next(e for e in helper.store.events() if e.kind == "grow-skip")
    assert skip.job_id == 9 and "is older" in " ".join(skip.data["steps"])
    assert fake.jobs[9].excluded_nodes == ""  # the plain memory restart: not pinned


def test_shadow_records_the_decision_and_leaves_every_job_alone(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", memory_horizon_s=60,
                                          actions={"grow-preempt": "shadow", "restart-memory": "shadow"})
    three_on_one_gpu(fake)
    grow_until(fake, samples, monitor, lambda: bool(ActionLedger(helper.store).rows("grow-preempt")))
    assert [fake.jobs[j].state for j in (7, 8, 9)] == ["RUNNING"] * 3
    (row,) = ActionLedger(helper.store).rows("grow-preempt")
    assert row.mode == "shadow" and row.job_id == 7 and row.data["evicted"][0] == 9
    shadow = [e for e in helper.store.events() if e.kind in ("grow-evict", "grow-restart")]
    assert shadow and all(e.data.get("shadow") and "would requeue" in e.detail for e in shadow)


def test_off_leaves_growth_to_the_memory_watch(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", memory_horizon_s=60,
                                          actions={"grow-preempt": "off"})
    three_on_one_gpu(fake)
    grow_until(fake, samples, monitor, lambda: fake.jobs[7].state != "RUNNING")
    assert fake.jobs[8].state == fake.jobs[9].state == "RUNNING"
    assert not [k for k in kinds(helper) if k.startswith("grow-")]
    assert "restart-memory" in kinds(helper)


def test_a_remembered_size_above_the_share_makes_a_preemptor_at_once(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce")
    helper.store.remember_size("grow", 4, "oom")
    three_on_one_gpu(fake)
    for job_id, start in ((7, 0), (8, 2), (9, 4)):
        put(samples, job_id, 5, 3 * GIB, start)
    monitor.tick()
    assert fake.jobs[9].state == "PENDING" and fake.jobs[8].state == "RUNNING"
    assert fake.jobs[7].tres_per_node.endswith("shard:4")
    restart = next(e for e in helper.store.events() if e.kind == "grow-restart")
    assert "remembered size 4" in " ".join(restart.data["steps"])


def test_a_job_that_overtook_the_queued_grower_on_its_gpu_is_evicted(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", grow_queued_min_wait_s=0)
    helper.store.remember_size("grow", 4, "oom")
    three_on_one_gpu(fake)
    for job_id, start in ((7, 0), (8, 2), (9, 4)):
        put(samples, job_id, 5, 3 * GIB, start)
    monitor.tick()
    assert fake.jobs[7].state == "PENDING"
    # before the grower starts, a new job takes the freed shares on its GPU (job 8 still runs)
    samples.now.pop(7)
    samples.now.pop(9)
    running(fake, 11, fp="late", shards=2, start=FAKE_EPOCH + 6)
    put(samples, 11, 6, 2 * GIB, 6)
    put(samples, 8, 6, 3 * GIB, 2)
    monitor.tick()
    assert fake.jobs[11].state == "PENDING" and fake.jobs[8].state == "RUNNING"
    evict = [e for e in helper.store.events() if e.kind == "grow-evict" and e.job_id == 11]
    assert evict and evict[0].data["grower"] == 7
    rows = ActionLedger(helper.store).rows("grow-preempt")
    assert any(not r.data["running"] and r.data["evicted"] == [11] for r in rows)


def test_grow_thresholds_are_checked_with_an_actionable_error():
    with pytest.raises(ConfigError, match="grow_"):
        MonitorSettings(grow_running_target="most")
    s = MonitorSettings(grow_running_max_evictions=1, grow_queued_target="max").grow_settings(7)
    assert (s.running.max_evictions, s.queued.target, s.max_packed_shares) == (1, "max", 7)


def test_a_victim_still_being_requeued_stays_held_until_the_grower_runs(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce")
    helper.store.remember_size("grow", 4, "oom")
    three_on_one_gpu(fake)
    for job_id, start in ((7, 0), (8, 2), (9, 4)):
        put(samples, job_id, 5, 3 * GIB, start)
    monitor.tick()
    young, grower = fake.jobs[9], fake.jobs[7]
    young.state = "COMPLETING"  # Slurm still ends its old run
    grower.state = "COMPLETING"  # and the grower's
    samples.now.clear()
    monitor.tick()
    assert young.priority == 0 and not [e for e in helper.store.events() if e.kind == "grow-release"]
    young.state = "PENDING"  # requeued and held, while the grower's old run still shows RUNNING
    grower.state = "RUNNING"  # (26.05 ends a requeue seconds later): not its new run yet
    monitor.tick()
    assert young.priority == 0 and not [e for e in helper.store.events() if e.kind == "grow-release"]
    grower.nodes, grower.gres_detail = "node1", ["shard:h100:4(IDX:0)"]
    grower.start_time = FAKE_EPOCH + 10  # its new run, started after the eviction
    monitor.tick()
    assert young.priority > 0
    assert [e.job_id for e in helper.store.events() if e.kind == "grow-release"] == [9]


def test_a_victim_goes_back_after_the_hold_limit_when_the_grower_does_not_start(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", grow_hold_victims_s=30)
    helper.store.remember_size("grow", 4, "oom")
    three_on_one_gpu(fake)
    for job_id, start in ((7, 0), (8, 2), (9, 4)):
        put(samples, job_id, 5, 3 * GIB, start)
    monitor.tick()
    samples.now.pop(7)
    samples.now.pop(9)
    put(samples, 8, 20, 3 * GIB, 2)  # the grower still waits 15 s later: the victim stays held
    monitor.tick()
    assert fake.jobs[9].priority == 0
    put(samples, 8, 40, 3 * GIB, 2)  # 35 s: past the limit
    monitor.tick()
    assert fake.jobs[9].priority > 0 and fake.jobs[7].state == "PENDING"
    (release,) = [e for e in helper.store.events() if e.kind == "grow-release"]
    assert "did not start within 30s" in release.detail


def test_a_typed_grower_keeps_its_gpu_type(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce")
    helper.store.remember_size("grow", 4, "oom")
    three_on_one_gpu(fake)
    fake.jobs[7].tres_per_node = "gres:shard:h100:1"  # as the submit path writes it
    for job_id, start in ((7, 0), (8, 2), (9, 4)):
        put(samples, job_id, 5, 3 * GIB, start)
    monitor.tick()
    assert fake.jobs[7].tres_per_node == "gres:shard:h100:4"
