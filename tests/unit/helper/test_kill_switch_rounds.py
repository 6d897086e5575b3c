"""The kill switch stops every run-time action within one watcher round (the stateful fake
Slurm and scripted samples of `rounds_support`): no requeue, restart, grow, regroup, steering
or priority change; the gpu+shard guard alone still runs. An event and a metric say so."""
from __future__ import annotations

from slurm_plugin.helper.watches.head_lift import Lift
from slurm_plugin.slurm.fake import FAKE_EPOCH

from tests.unit.helper import rounds_support
from tests.unit.helper.rounds_support import GIB, running


def make(tmp_path, **settings):
    return rounds_support.make(tmp_path, "enforce", fixed_clock=True, **settings)


def _changing_calls(fake) -> list:
    return [c for c in fake.calls if c[0] == "scontrol" and c[1] in ("requeuehold", "requeue", "update", "release")]


def _contention(fake, samples, monitor, *, rounds_after=10):
    """Job 2 arrives beside job 1 and costs it 25 % of its speed (a contention requeue)."""
    running(fake, 1, fp="aaaa", start=FAKE_EPOCH)
    for t in range(10):
        samples.put(1, FAKE_EPOCH + t, throughput=20.0, started_at=FAKE_EPOCH)
        monitor.tick()
    running(fake, 2, fp="bbbb", start=FAKE_EPOCH + 10)
    for t in range(10, 10 + rounds_after):
        samples.put(1, FAKE_EPOCH + t, throughput=15.0, started_at=FAKE_EPOCH)
        samples.put(2, FAKE_EPOCH + t, throughput=30.0, started_at=FAKE_EPOCH + 10)
        monitor.tick()


def test_with_the_switch_on_the_watcher_requeues_nothing(tmp_path):
    fake, helper, samples, monitor = make(tmp_path)
    helper.paths.kill_switch.touch()
    _contention(fake, samples, monitor)
    assert fake.jobs[2].state == "RUNNING"  # without the switch: requeued (test_monitor_rounds)
    assert _changing_calls(fake) == []
    assert not [e for e in helper.store.events() if e.kind == "requeue-contention"]
    (event,) = [e for e in helper.store.events() if e.kind == "kill-switch"]
    assert event.detail.startswith("on: ") and str(helper.paths.kill_switch) in event.detail
    assert "gpupack_actions_halted 1.0" in monitor.metrics_text()


def test_the_switch_takes_effect_at_the_next_round_and_its_removal_too(tmp_path):
    fake, helper, samples, monitor = make(tmp_path)
    _contention(fake, samples, monitor, rounds_after=1)  # too early to judge: nothing yet
    assert fake.jobs[2].state == "RUNNING"
    helper.paths.kill_switch.touch()
    for t in range(11, 20):
        samples.put(1, FAKE_EPOCH + t, throughput=15.0, started_at=FAKE_EPOCH)
        samples.put(2, FAKE_EPOCH + t, throughput=30.0, started_at=FAKE_EPOCH + 10)
        monitor.tick()
    assert fake.jobs[2].state == "RUNNING" and _changing_calls(fake) == []
    helper.paths.kill_switch.unlink()
    samples.put(1, FAKE_EPOCH + 20, throughput=15.0, started_at=FAKE_EPOCH)
    monitor.tick()
    assert "gpupack_actions_halted 0.0" in monitor.metrics_text()
    kinds = [e.detail.split(":")[0] for e in reversed(helper.store.events()) if e.kind == "kill-switch"]
    assert kinds == ["on", "off"]
    assert fake.jobs[2].state == "PENDING"  # acting again: the newcomer is requeued


def test_no_restart_no_steering_no_priority_change_with_the_switch_on(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, memory_horizon_s=60)
    helper.paths.kill_switch.touch()
    helper.store.pairs.avoid_pair("aaaa", "bbbb", "test")
    running(fake, 1, fp="aaaa", node="node2")
    fake.submit(job_id=3, state="PENDING", gres="gres:shard:2", admin_comment="gpupack: packed shard:2 fp=bbbb")
    running(fake, 7, fp="grow", shards=1)  # outgrows its one share (10 GiB) at t = 27
    monitor.state.heading[9] = Lift(0, -10)  # a job requeued before the switch was turned on
    fake.submit(job_id=9, state="PENDING", gres="gres:shard:2", priority=5)
    for t in range(40):
        samples.put(7, FAKE_EPOCH + t, mem=int(2 * GIB + t * 0.3 * GIB), started_at=FAKE_EPOCH)
        monitor.tick()
    assert fake.jobs[7].state == "RUNNING" and fake.jobs[3].excluded_nodes == ""
    assert fake.jobs[9].priority == 5
    assert _changing_calls(fake) == []


def test_the_gpu_shard_guard_still_runs_with_the_switch_on(tmp_path):
    """The one step that keeps a packed job from running unisolated beside a whole-GPU job."""
    fake, helper, samples, monitor = make(tmp_path)
    helper.paths.kill_switch.touch()
    fake.submit(job_id=1, state="RUNNING", nodes="node1", gres="gres:gpu:1", gres_detail=["gpu:h100:1(IDX:0)"],
                start_time=FAKE_EPOCH)
    running(fake, 2, fp="late", gpu=0, start=FAKE_EPOCH + 5)
    monitor.tick()
    assert fake.jobs[2].state == "PENDING" and "node1" in fake.jobs[2].excluded_nodes
