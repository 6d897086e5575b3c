"""The monitor's rounds against a stateful fake Slurm and a scripted sample source."""
from __future__ import annotations

import pytest

from packer.decision import max_shards
from store.db import RunRecord
from slurm_plugin.helper.monitor import Monitor
from slurm_plugin.slurm.fake import FAKE_EPOCH, FakeSlurm
from slurm_plugin.slurm.runner import SlurmRunner

from tests.unit.helper import rounds_support
from tests.unit.helper.rounds_support import GIB, FakeHelper, Samples, running


def make(tmp_path, mode="enforce", **settings):
    """These rounds date only their samples: the monitor's clock stays at FAKE_EPOCH."""
    return rounds_support.make(tmp_path, mode, fixed_clock=True, **settings)


def test_newcomer_that_slows_its_neighbour_is_requeued_at_head_and_the_pair_avoided(tmp_path):
    fake, helper, samples, monitor = make(tmp_path)
    running(fake, 1, fp="aaaa", start=FAKE_EPOCH)
    fake.submit(job_id=5, state="PENDING", gres="gres:gpu:1", priority=4294901700)
    for t in range(10):  # the senior alone: 20 it/s
        samples.put(1, FAKE_EPOCH + t, throughput=20.0, started_at=FAKE_EPOCH)
        monitor.tick()
    running(fake, 2, fp="bbbb", start=FAKE_EPOCH + 10)
    for t in range(10, 16):  # the newcomer arrives: the senior drops to 15 it/s (25 %)
        samples.put(1, FAKE_EPOCH + t, throughput=15.0, started_at=FAKE_EPOCH)
        samples.put(2, FAKE_EPOCH + t, throughput=30.0, started_at=FAKE_EPOCH + 10)
        monitor.tick()
    job = fake.jobs[2]
    assert job.state == "PENDING"
    assert job.priority > fake.jobs[5].priority  # the next job to start
    assert "node1" in job.excluded_nodes
    assert fake.jobs[1].state == "RUNNING"  # the senior is never touched
    assert helper.store.pairs.must_avoid("aaaa", "bbbb")
    (event,) = [e for e in helper.store.events() if e.kind == "requeue-contention"]
    assert event.job_id == 2 and "lost 25%" in event.detail
    verbs = [c[1] for c in fake.calls if c[0] == "scontrol" and c[1] != "--version"]
    assert verbs.index("requeuehold") < verbs.index("release")  # changed while held
    assert not any("scancel" in c for c in fake.calls)


def test_no_action_is_taken_on_a_stale_nodes_figures_and_the_event_says_so(tmp_path):
    fake, helper, samples, monitor = make(tmp_path)
    running(fake, 1, fp="aaaa", start=FAKE_EPOCH)
    for t in range(10):
        samples.put(1, FAKE_EPOCH + t, throughput=20.0, started_at=FAKE_EPOCH)
        monitor.tick()
    running(fake, 2, fp="bbbb", start=FAKE_EPOCH + 10)
    samples.stale = {"node1": "its agent does not answer (connection refused)"}  # as AgentSamples reports it
    for t in range(10, 16):  # the same slowdown that gets the newcomer requeued when fresh
        samples.put(1, FAKE_EPOCH + t, throughput=15.0, started_at=FAKE_EPOCH)
        samples.put(2, FAKE_EPOCH + t, throughput=30.0, started_at=FAKE_EPOCH + 10)
        monitor.tick()
    assert fake.jobs[2].state == "RUNNING" and not helper.store.pairs.must_avoid("aaaa", "bbbb")
    (event,) = [e for e in helper.store.events() if e.kind == "requeue-contention-stale"]  # once, not per round
    assert event.job_id == 2 and "stale" in event.detail and "connection refused" in event.detail
    assert not [e for e in helper.store.events() if e.kind == "requeue-contention"]


def test_two_copies_of_one_workload_that_slow_each_other_are_kept_apart(tmp_path):
    """Found live: identical jobs were requeued beside each other every ~10 s, since a pair of
    one fingerprint was never recorded; the next copy must be steered off the running one's node."""
    fake, helper, samples, monitor = make(tmp_path)
    running(fake, 1, fp="same", start=FAKE_EPOCH)
    for t in range(10):
        samples.put(1, FAKE_EPOCH + t, throughput=20.0, started_at=FAKE_EPOCH)
        monitor.tick()
    running(fake, 2, fp="same", start=FAKE_EPOCH + 10)
    for t in range(10, 16):
        samples.put(1, FAKE_EPOCH + t, throughput=15.0, started_at=FAKE_EPOCH)
        samples.put(2, FAKE_EPOCH + t, throughput=15.0, started_at=FAKE_EPOCH + 10)
        monitor.tick()
    assert fake.jobs[2].state == "PENDING" and fake.jobs[1].state == "RUNNING"
    assert helper.store.pairs.must_avoid("same", "same")
    fake.submit(job_id=3, state="PENDING", gres="gres:shard:2", admin_comment="gpupack: packed shard:2 fp=same")
    samples.put(1, FAKE_EPOCH + 16, throughput=20.0, started_at=FAKE_EPOCH)
    monitor.tick()
    assert "node1" in fake.jobs[3].excluded_nodes  # a third copy is kept off the running one's node


def test_newcomer_that_slows_a_silent_neighbour_is_seen_in_the_gpu_counters_and_requeued(tmp_path):
    import random

    fake, helper, samples, monitor = make(tmp_path)
    rng = random.Random(4)
    running(fake, 1, fp="aaaa", start=FAKE_EPOCH)
    for t in range(20):  # the senior alone, ~70 % busy; it reports nothing
        samples.put(1, FAKE_EPOCH + t, started_at=FAKE_EPOCH, util=70 + rng.gauss(0, 3), util_source="nvml-process")
        monitor.tick()
    running(fake, 2, fp="bbbb", start=FAKE_EPOCH + 20)
    for t in range(20, 29):  # ~49 % busy beside the newcomer: too early to judge (settle + 8 rounds)
        samples.put(1, FAKE_EPOCH + t, started_at=FAKE_EPOCH, util=49 + rng.gauss(0, 3), util_source="nvml-process")
        samples.put(2, FAKE_EPOCH + t, started_at=FAKE_EPOCH + 20, util=60, util_source="nvml-process")
        monitor.tick()
    assert fake.jobs[2].state == "RUNNING"
    for t in range(29, 32):
        samples.put(1, FAKE_EPOCH + t, started_at=FAKE_EPOCH, util=49 + rng.gauss(0, 3), util_source="nvml-process")
        samples.put(2, FAKE_EPOCH + t, started_at=FAKE_EPOCH + 20, util=60, util_source="nvml-process")
        monitor.tick()
    assert fake.jobs[2].state == "PENDING" and fake.jobs[1].state == "RUNNING"
    (event,) = [e for e in helper.store.events() if e.kind == "requeue-contention"]
    assert event.job_id == 2 and event.data["signals"] == ["utilisation"] and "GPU utilisation" in event.detail
    assert helper.store.pairs.must_avoid("aaaa", "bbbb")


def test_a_reported_utilisation_is_not_taken_for_a_counter(tmp_path):
    fake, helper, samples, monitor = make(tmp_path)
    running(fake, 1, fp="aaaa", start=FAKE_EPOCH)
    for t in range(20):
        samples.put(1, FAKE_EPOCH + t, started_at=FAKE_EPOCH, util=70, util_source="report")
        monitor.tick()
    running(fake, 2, fp="bbbb", start=FAKE_EPOCH + 20)
    for t in range(20, 35):  # what a job says of its utilisation is not measured contention
        samples.put(1, FAKE_EPOCH + t, started_at=FAKE_EPOCH, util=30, util_source="report")
        samples.put(2, FAKE_EPOCH + t, started_at=FAKE_EPOCH + 20)
        monitor.tick()
    assert fake.jobs[2].state == "RUNNING"
    assert not [e for e in helper.store.events() if e.kind == "requeue-contention"]


def test_no_contention_action_on_a_guess_where_the_counters_are_unavailable_and_the_node_says_so(tmp_path):
    fake, helper, samples, monitor = make(tmp_path)
    blind = "unavailable: dcgm-profiling: Profiling is not supported for this group of GPUs or GPU"
    running(fake, 1, fp="aaaa", start=FAKE_EPOCH)
    for t in range(20):  # an agent that put a figure beside "unavailable" is not believed
        samples.put(1, FAKE_EPOCH + t, started_at=FAKE_EPOCH, util=70, util_source=blind)
        monitor.tick()
    running(fake, 2, fp="bbbb", start=FAKE_EPOCH + 20)
    for t in range(20, 35):  # the same fall that a counter's samples would be acted on
        samples.put(1, FAKE_EPOCH + t, started_at=FAKE_EPOCH, util=30, util_source=blind)
        samples.put(2, FAKE_EPOCH + t, started_at=FAKE_EPOCH + 20, util_source=blind)
        monitor.tick()
    assert fake.jobs[2].state == "RUNNING" and fake.jobs[1].state == "RUNNING"
    assert not [e for e in helper.store.events() if e.kind == "requeue-contention"]
    (event,) = [e for e in helper.store.events() if e.kind == "counters-unavailable"]  # once, not per round
    assert event.data["reason"] == "dcgm-profiling" and event.data["node"] == "node1"
    assert "Profiling is not supported" in event.detail and "only from what jobs report" in event.detail


def test_pending_packed_job_is_kept_off_the_node_of_an_avoided_partner(tmp_path):
    fake, helper, samples, monitor = make(tmp_path)
    helper.store.pairs.avoid_pair("aaaa", "bbbb", "test")
    running(fake, 1, fp="aaaa", node="node2")
    fake.submit(job_id=3, state="PENDING", gres="gres:shard:2", admin_comment="gpupack: packed shard:2 fp=bbbb",
                excluded_nodes="node9")
    fake.submit(job_id=4, state="PENDING", gres="gres:shard:2", admin_comment="gpupack: packed shard:2 fp=cccc")
    monitor.tick()
    assert set(fake.jobs[3].excluded_nodes.split(",")) == {"node2", "node9"}
    assert fake.jobs[4].excluded_nodes == ""
    assert fake.jobs[3].admin_comment.endswith("fp=bbbb avoid=node2")  # ours, written down
    # the helper restarts (its memory is gone); the partner ends: the exclusion we added goes,
    # the user's stays
    fake.jobs[1].state = "COMPLETED"
    _, _, _, restarted = make(tmp_path)
    restarted.runner, restarted.store = monitor.runner, helper.store
    restarted.tick()
    assert fake.jobs[3].excluded_nodes == "node9"
    assert "avoid=" not in fake.jobs[3].admin_comment


def test_pending_packed_job_is_kept_off_a_stale_node_until_it_is_fresh(tmp_path):
    fake, helper, samples, monitor = make(tmp_path)
    fake.submit(job_id=3, state="PENDING", gres="gres:shard:2", admin_comment="gpupack: packed shard:2 fp=bbbb")
    fake.submit(job_id=4, state="PENDING", gres="gres:gpu:1", admin_comment="gpupack: exclusive fp=cccc")
    samples.stale = {"node2": "its agent does not answer"}
    monitor.tick()
    assert fake.jobs[3].excluded_nodes == "node2" and fake.jobs[4].excluded_nodes == ""
    (event,) = [e for e in helper.store.events() if e.kind == "steer"]
    assert "stale" in event.detail
    samples.stale = {"node1": "x", "node2": "y"}  # every node stale: excluding all would refuse the job
    monitor.tick()
    assert fake.jobs[3].excluded_nodes == ""
    samples.stale = {"node2": "its agent does not answer"}
    monitor.tick()
    assert fake.jobs[3].excluded_nodes == "node2"
    samples.stale = {}  # its agent answers again: the exclusion we added is lifted
    monitor.tick()
    assert fake.jobs[3].excluded_nodes == ""


def test_pending_packed_jobs_partners_are_read_in_one_query_per_round(tmp_path):
    fake, helper, samples, monitor = make(tmp_path)
    helper.store.pairs.avoid_pair("aaaa", "bbbb", "test")
    helper.store.pairs.avoid_pair("cccc", "bbbb", "test")
    helper.store.pairs.avoid_pair("dddd", "eeee", "test")
    running(fake, 1, fp="aaaa", node="node2")
    running(fake, 2, fp="cccc", node="node3")
    running(fake, 3, fp="eeee", node="node4")
    for job_id, fp in ((10, "bbbb"), (11, "dddd"), (12, "ffff"), (13, "bbbb")):
        fake.submit(job_id=job_id, state="PENDING", gres="gres:shard:2", admin_comment=f"gpupack: packed shard:2 fp={fp}")
    statements: list[str] = []
    helper.store.db.conn.set_trace_callback(statements.append)
    monitor.tick()
    helper.store.db.conn.set_trace_callback(None)
    reads = [q for q in statements if not q.lower().startswith("delete")]  # the retention watch's prune
    assert len([q for q in reads if "from avoid_pairs" in q.lower() or "join avoid_pairs" in q.lower()]) == 1
    assert {j: set(filter(None, fake.jobs[j].excluded_nodes.split(","))) for j in (10, 11, 12, 13)} == {
        10: {"node2", "node3"}, 11: {"node4"}, 12: set(), 13: {"node2", "node3"}}


def test_observe_mode_only_logs(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="observe")
    running(fake, 1, fp="aaaa")
    for t in range(10):
        samples.put(1, FAKE_EPOCH + t, throughput=20.0, started_at=FAKE_EPOCH)
        monitor.tick()
    running(fake, 2, fp="bbbb", start=FAKE_EPOCH + 10)
    for t in range(10, 16):
        samples.put(1, FAKE_EPOCH + t, throughput=10.0, started_at=FAKE_EPOCH)
        samples.put(2, FAKE_EPOCH + t, throughput=10.0, started_at=FAKE_EPOCH + 10)
        monitor.tick()
    assert fake.jobs[2].state == "RUNNING"
    events = [e for e in helper.store.events() if e.kind == "requeue-contention"]
    assert len(events) == 1 and events[0].detail.startswith("would requeue (observe mode)")


def test_growing_job_is_restarted_on_a_larger_size_and_the_size_remembered(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, memory_horizon_s=60)
    running(fake, 7, fp="grow", shards=1)  # one share = 10 GiB
    for t in range(40):
        samples.put(7, FAKE_EPOCH + t, mem=int(2 * GIB + t * 0.3 * GIB), started_at=FAKE_EPOCH)
        monitor.tick()
        if fake.jobs[7].state == "PENDING":
            break
    job = fake.jobs[7]
    assert job.state == "PENDING", "restarted before it reached its 10 GiB"
    assert t < 27  # 2 + 0.3 t reaches 10 GiB at t = 27
    assert job.tres_per_node in ("gres:shard:2", "gres:shard:3", "gres:shard:4")
    assert helper.store.remembered_size("grow") == int(job.tres_per_node.rsplit(":", 1)[1])
    assert "memory-restart" in job.admin_comment
    assert [e.kind for e in helper.store.events()].count("restart-memory") == 1


def _outgrow_every_share(tmp_path, release):
    """A shard:4 job (40 GiB) growing 1.5 GiB/s from 30 GiB: the restart it needs is a whole GPU."""
    fake, helper, samples, monitor = make(tmp_path, memory_horizon_s=60, release=release)
    running(fake, 7, fp="big", shards=4)
    for t in range(8):
        samples.put(7, FAKE_EPOCH + t, mem=int(30 * GIB + t * 1.5 * GIB), started_at=FAKE_EPOCH)
        monitor.tick()
        if fake.jobs[7].state == "PENDING":
            break
    return fake, helper


def test_a_job_that_needs_a_whole_gpu_is_restarted_on_one_where_slurm_can_change_its_gres(tmp_path):
    fake, helper = _outgrow_every_share(tmp_path, "24.11.5")
    assert fake.jobs[7].state == "PENDING" and fake.jobs[7].tres_per_node == "gres/gpu:1"
    assert fake.jobs[7].priority > 0  # released at the head, not left held
    (event,) = [e for e in helper.store.events() if e.kind == "restart-memory"]
    assert event.data["to"] == "gpu:1"


def test_on_2205_a_shard_job_that_needs_a_whole_gpu_keeps_running_and_its_next_run_is_exclusive(tmp_path):
    """22.05 refuses `Gres=gpu:1` on a requeued shard job: a requeue would only bring it back
    on the same share (or leave it held), so it keeps running and its size is remembered."""
    fake, helper = _outgrow_every_share(tmp_path, "22.05.8")
    assert fake.jobs[7].state == "RUNNING"
    (kept,) = [e for e in helper.store.events() if e.kind == "keep-memory"]
    assert "cannot turn a shard job into a GPU job" in kept.detail and "22.05.8" in kept.detail
    assert not [e for e in helper.store.events() if e.kind.startswith("restart-memory")]
    assert helper.store.remembered_size("big") > max_shards(helper.config())


def test_a_requeued_job_whose_change_slurm_refuses_goes_back_to_the_head_as_it_was(tmp_path):
    """Never left held for good: the refused change is an event and the job is released."""
    fake, helper, samples, monitor = make(tmp_path)  # 22.05: a shard job cannot become a gpu job
    running(fake, 7, fp="big", shards=4)
    monitor.tick()
    done = monitor.actions.requeue_at_head(fake_job(monitor, 7), "restart-memory", "test", gres="gpu:1")
    assert done is False
    job = fake.jobs[7]
    assert job.state == "PENDING" and job.priority > 0 and job.tres_per_node == "gres:shard:4"
    (failed,) = [e for e in helper.store.events() if e.kind == "restart-memory-failed"]
    assert "released at the head as it was" in failed.detail and "Invalid generic resource" in failed.detail


def fake_job(monitor, job_id):
    (job,) = monitor.actions.runner.jobs([job_id])
    return job


def test_history_is_recorded_when_a_tracked_job_completes(tmp_path):
    fake, helper, samples, monitor = make(tmp_path)
    running(fake, 9, fp="hist")
    for t in range(5):
        samples.put(9, FAKE_EPOCH + t, mem=(3 + t) * GIB, throughput=12.0, util=40.0, started_at=FAKE_EPOCH)
        monitor.tick()
    fake.jobs[9].state = "COMPLETED"
    samples.now.clear()
    monitor.tick()
    est = helper.store.estimate("hist")
    assert est is not None and est.peak_mem_bytes == 7 * GIB and est.mean_util_pct == pytest.approx(40.0)
    assert helper.store.runs("hist")[0].throughput == pytest.approx(12.0)


def test_a_failed_run_is_only_a_lower_bound(tmp_path):
    """A failed run's peak is what it reached before it failed, not what it needs."""
    fake, helper, samples, monitor = make(tmp_path)
    running(fake, 9, fp="hist")
    samples.put(9, FAKE_EPOCH, mem=GIB, started_at=FAKE_EPOCH)
    monitor.tick()
    fake.jobs[9].state = "FAILED"
    samples.now.clear()
    monitor.tick()
    (run,) = helper.store.runs("hist")
    assert run.lower_bound and run.end_state == "failed" and run.peak_mem_bytes == GIB
    assert not helper.store.estimate("hist").measured
    (event,) = [e for e in helper.store.events() if e.kind == "history"]
    assert "lower bound 1.00GiB (failed)" in event.detail and event.data["lower_bound"] is True


@pytest.mark.parametrize("state", ["CANCELLED", "OUT_OF_MEMORY", "TIMEOUT"])
def test_a_cancelled_or_out_of_memory_run_is_never_a_measurement(tmp_path, state):
    fake, helper, samples, monitor = make(tmp_path)
    running(fake, 9, fp="hist")
    for t in range(3):
        samples.put(9, FAKE_EPOCH + t, mem=2 * GIB, started_at=FAKE_EPOCH)
        monitor.tick()
    fake.jobs[9].state = state
    samples.now.clear()
    monitor.tick()
    (run,) = helper.store.runs("hist")
    assert run.lower_bound and run.peak_mem_bytes == 2 * GIB


def test_a_completed_run_whose_samples_stop_before_its_end_is_a_lower_bound(tmp_path):
    """Its node agent went away 30 s before the job ended: what it did then nobody saw."""
    fake, helper, samples, monitor = rounds_support.make(tmp_path)  # the clock follows the samples
    running(fake, 9, fp="hist")
    for t in range(5):
        samples.put(9, FAKE_EPOCH + t, mem=(3 + t) * GIB, started_at=FAKE_EPOCH)
        monitor.tick()
    samples.now.clear()  # the agent is down: no samples
    samples.clock = FAKE_EPOCH + 34
    monitor.tick()
    fake.jobs[9].state, fake.jobs[9].end_time = "COMPLETED", FAKE_EPOCH + 34
    monitor.tick()
    (run,) = helper.store.runs("hist")
    assert run.lower_bound and run.end_state == "gaps 30s without samples" and run.peak_mem_bytes == 7 * GIB
    assert not helper.store.estimate("hist").measured


def test_a_completed_run_with_no_memory_measured_is_not_history_unless_seen_from_its_start(tmp_path):
    fake, helper, samples, monitor = make(tmp_path)
    running(fake, 9, fp="hist")
    for t in range(3):  # first seen 60 s into the run: it may have used its GPU before
        samples.put(9, FAKE_EPOCH + 60 + t, mem=0, util=0.0, started_at=FAKE_EPOCH)
        monitor.tick()
    fake.jobs[9].state = "COMPLETED"
    samples.now.clear()
    monitor.tick()
    assert helper.store.runs("hist") == [] and helper.store.estimate("hist") is None
    assert not [e for e in helper.store.events() if e.kind == "history"]


def test_a_completed_run_seen_from_its_start_without_touching_its_gpu_is_a_zero_byte_run(tmp_path):
    fake, helper, samples, monitor = make(tmp_path)
    running(fake, 9, fp="hist")
    for t in range(3):
        samples.put(9, FAKE_EPOCH + t, mem=0, util=0.0, started_at=FAKE_EPOCH)
        monitor.tick()
    fake.jobs[9].state = "COMPLETED"
    samples.now.clear()
    monitor.tick()
    (run,) = helper.store.runs("hist")
    assert (run.untouched, run.peak_mem_bytes, run.mean_util_pct, run.lower_bound) == (True, 0, 0.0, False)


def test_a_requeued_job_gets_one_row_for_the_run_that_completed(tmp_path):
    fake, helper, samples, monitor = make(tmp_path)
    running(fake, 9, fp="hist")
    samples.put(9, FAKE_EPOCH, mem=2 * GIB, started_at=FAKE_EPOCH)
    monitor.tick()
    fake.jobs[9].state = "PENDING"  # requeued: that run is a lower bound
    samples.now.clear()
    monitor.tick()
    running(fake, 9, fp="hist", start=FAKE_EPOCH + 20)
    second = FAKE_EPOCH + 20
    # the controller's epilog recorded the second run first (the agent's start keys the run)
    helper.store.record_run(RunRecord(job_id=9, fingerprint="hist", peak_mem_bytes=5 * GIB, started_at=second))
    for t in range(3):
        samples.put(9, second + t, mem=(5 + t) * GIB, started_at=second)
        monitor.tick()
    fake.jobs[9].state = "COMPLETED"
    samples.now.clear()
    monitor.tick()
    run, first = helper.store.runs("hist")
    assert run.started_at == second and run.peak_mem_bytes == 7 * GIB and not run.lower_bound
    assert first.started_at == FAKE_EPOCH and first.lower_bound and first.end_state == "requeued"
    # one event, the first run's: none for the second, recorded already
    assert [e.kind for e in helper.store.events()].count("history") == 1


def test_gpu_given_whole_and_as_shards_requeues_the_late_comer(tmp_path):
    fake, helper, samples, monitor = make(tmp_path)
    fake.submit(job_id=1, state="RUNNING", nodes="node1", gres="gres:gpu:1", gres_detail=["gpu:h100:1(IDX:0)"],
                start_time=FAKE_EPOCH)
    running(fake, 2, fp="late", gpu=0, start=FAKE_EPOCH + 5)
    running(fake, 3, fp="fine", gpu=1, start=FAKE_EPOCH + 6)
    monitor.tick()
    assert fake.jobs[2].state == "PENDING" and "node1" in fake.jobs[2].excluded_nodes
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[3].state == "RUNNING"
    (event,) = [e for e in helper.store.events() if e.kind == "requeue-quirk"]
    assert "23.11.5" in event.detail
    # the whole-GPU job ends: the temporary exclusion is lifted
    fake.jobs[1].state = "COMPLETED"
    monitor.tick()
    assert fake.jobs[2].excluded_nodes == ""


def test_mps_shares_follow_measured_utilisation(tmp_path):
    from slurm_plugin.agent.client import AgentUnavailable

    fake, helper, samples, monitor = make(tmp_path)
    sent: list[tuple] = []

    class Link:  # the agents, as the MPS watch reaches them (AgentLink.call)
        down = True

        def call(self, node, op, request=None, timeout=None):
            if self.down:
                raise AgentUnavailable("connection refused")
            if op == "mps_plan":
                sent.append((node, op, request))
            return {"status": "ok", "changes": []}

    monitor.agents = link = Link()
    running(fake, 1, fp="m1")
    running(fake, 2, fp="m2", start=FAKE_EPOCH + 1)
    samples.put(1, FAKE_EPOCH + 2, isolation="mps:50", util=30.0, started_at=FAKE_EPOCH)
    samples.put(2, FAKE_EPOCH + 2, isolation="mps:50", util=50.0, started_at=FAKE_EPOCH + 1)
    monitor.tick()
    plan = monitor.mps_plan[("node1", "0")]
    assert sum(plan.values()) == 100 and plan[2] > plan[1] >= 33
    assert sent == []  # the agent did not answer: sent on a later round
    link.down = False
    monitor.tick()
    ((node, op, request),) = sent
    assert (node, op) == ("node1", "mps_plan") and request["plan"] == {"0": {"1": plan[1], "2": plan[2]}}
    assert request["generation"] >= FAKE_EPOCH * 1000
    monitor.tick()
    assert len(sent) == 1  # unchanged: not sent again


def test_metrics_text_counts_events_and_is_written_for_the_textfile_collector(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    fake, helper, samples, monitor = make(tmp_path)
    helper.store.log_event("requeue-contention", "x", 1)
    monitor.tick()
    families = {f.name: f for f in text_string_to_metric_families(monitor.metrics_text())}
    requeues = {s.labels["kind"]: s.value for s in families["gpupack_requeues"].samples if s.name.endswith("_total")}
    assert requeues["contention"] == 1 and requeues["gpu-shard-collision"] == 0
    assert families["gpupack_monitor_rounds"].samples[0].value == 1
    written = {f.name for f in text_string_to_metric_families((tmp_path / "metrics.prom").read_text())}
    assert "gpupack_requeues" in written and "gpupack_monitor_rounds" in written
    assert not [n for n in written if not n.startswith("gpupack_")]  # node_exporter has its own process_*
    assert "process_cpu_seconds" in families  # the endpoint has them


def test_a_slurm_hiccup_skips_the_round(tmp_path, caplog):
    fake, helper, samples, monitor = make(tmp_path)

    def broken(args, env, timeout):
        from slurm_plugin.slurm.runner import CommandResult
        return CommandResult(tuple(args), 1, "", "Unable to contact slurm controller (connect failure)\n")

    monitor.runner = SlurmRunner(executor=broken)
    monitor._stop.set()
    monitor._run()  # returns at once; must not raise
    with pytest.raises(Exception):
        monitor.tick()


def test_every_events_option_has_help_and_the_command_reads_the_log(tmp_path):
    from click.testing import CliRunner

    from store.db import RunRecord, Store
    from slurm_plugin.cli.events_cmd import events

    db = tmp_path / "g.db"
    store = Store(db)
    store.log_event("requeue-contention", "job 1 lost 25%", 2, hurt=[1])
    store.close()
    runner = CliRunner()
    assert runner.invoke(events, ["-h"]).exit_code == 0
    out = runner.invoke(events, ["--database", str(db)])
    assert out.exit_code == 0 and "requeue-contention" in out.output and "job 1 lost 25%" in out.output
    out = runner.invoke(events, ["--database", str(db), "--json"])
    assert out.exit_code == 0 and '"hurt": [\n' in out.output or '"hurt"' in out.output
    missing = runner.invoke(events, ["--database", str(tmp_path / "none.db")])
    assert missing.exit_code == 1 and "no gpupack database" in missing.output


def _restart_round(tmp_path, **settings) -> int | None:
    """The sample at which a job loading from 2 GiB at 0.3 GiB/s into its 10 GiB share is restarted."""
    fake, helper, samples, monitor = make(tmp_path, memory_horizon_s=60, **settings)
    running(fake, 7, fp="grow", shards=1)
    for t in range(40):
        samples.put(7, FAKE_EPOCH + t, mem=int(2 * GIB + t * 0.3 * GIB), started_at=FAKE_EPOCH)
        monitor.tick()
        if fake.jobs[7].state == "PENDING":
            return t
    return None


def test_a_load_is_restarted_while_the_helper_still_has_time_to_act(tmp_path):
    """Memory that more than doubles reads as a load (predictor.forecast's warm-up rule) and is
    extrapolated only as far as the helper needs to act: more time to act, an earlier restart."""
    quick = _restart_round(tmp_path / "quick", memory_act_s=1.0)
    slow = _restart_round(tmp_path / "slow", memory_act_s=8.0)
    assert quick is not None and slow is not None
    assert 2 + 0.3 * (slow + 9) > 10  # restarted within 8 s + a round (1 s) of the share, not before
    assert slow < quick < 27


def test_the_restart_reason_prices_both_choices(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, memory_horizon_s=60)
    running(fake, 7, fp="grow", shards=1)
    for t in range(40):
        samples.put(7, FAKE_EPOCH + t, mem=int(2 * GIB + t * 0.3 * GIB), started_at=FAKE_EPOCH)
        monitor.tick()
        if fake.jobs[7].state == "PENDING":
            break
    (event,) = [e for e in helper.store.events() if e.kind == "restart-memory"]
    assert "restarting now loses" in event.detail and "an OOM would lose" in event.detail
    assert "expected loss keeping it" in event.detail


def test_a_long_run_near_a_probable_oom_is_kept_when_a_failure_costs_no_more_than_a_restart(tmp_path):
    """27 h of work and an OOM a few seconds away that is only 99 % certain: with no extra
    price on a failure, restarting now is expected to lose more than letting it run."""
    fake, helper, samples, monitor = make(tmp_path, memory_horizon_s=10**6, restart_cost_s=0, oom_penalty_s=0)
    start = FAKE_EPOCH - 100_000
    running(fake, 7, fp="grow", shards=1, start=start)
    for t in range(27):
        samples.put(7, FAKE_EPOCH + t, mem=int(2 * GIB + t * 0.3 * GIB), started_at=start)
        monitor.tick()
    assert fake.jobs[7].state == "RUNNING"
    kept = [e for e in helper.store.events() if e.kind == "keep-memory"]
    assert len(kept) == 1 and "costs less than a restart" in kept[0].detail
    assert kept[0].data["lose_now_s"] >= 100_000
    assert not [e for e in helper.store.events() if e.kind == "restart-memory"]
    # the default price of a failure (its user resubmits it) restarts the same job (on a whole
    # GPU, the far horizon's size: on 24.11, where a shard job's GRES can become gpu:1)
    fake, helper, samples, monitor = make(tmp_path / "priced", memory_horizon_s=10**6, release="24.11.5")
    running(fake, 7, fp="grow", shards=1, start=start)
    for t in range(27):
        samples.put(7, FAKE_EPOCH + t, mem=int(2 * GIB + t * 0.3 * GIB), started_at=start)
        monitor.tick()
        if fake.jobs[7].state == "PENDING":
            break
    assert fake.jobs[7].state == "PENDING"


def test_action_modes_follow_an_edit_of_the_settings_file(tmp_path, caplog):
    """`[monitor.actions]` is re-read when gpupack.toml changes, as `[packer]` is."""
    import os

    from slurm_plugin.config.reloading import ReloadingConfig

    toml = tmp_path / "gpupack.toml"

    def write(actions: str, stamp: int) -> None:
        toml.write_text(f'[packer]\nmode = "enforce"\n\n[monitor]\ninterval_s = 1.0\n\n[monitor.actions]\n{actions}\n')
        os.utime(toml, ns=(stamp, stamp))  # a new mtime even within the file system's resolution

    write('restart-memory = "off"', 1_000_000_000)
    helper = FakeHelper(tmp_path)
    helper.config = ReloadingConfig(toml)
    fake = FakeSlurm()
    monitor = Monitor(helper, runner=SlurmRunner(executor=fake), samples=Samples(), clock=lambda: float(FAKE_EPOCH))
    monitor.tick()
    assert monitor.actions.mode_of("restart-memory").mode == "off"
    assert monitor.actions.mode_of("regroup").mode == "enforce"  # follows mode
    write('restart-memory = "shadow"\nregroup = "off"', 2_000_000_000)
    monitor.tick()
    assert monitor.actions.mode_of("restart-memory").mode == "shadow"
    assert monitor.actions.mode_of("regroup").mode == "off"
    write('restart-memory = "maybe"', 3_000_000_000)  # a bad edit keeps the modes in force
    monitor.tick()
    assert monitor.actions.mode_of("restart-memory").mode == "shadow"
    assert "edit refused, keeping the settings in force" in caplog.text and "off, shadow, enforce" in caplog.text
    (refused,) = [e for e in helper.store.events() if e.kind == "config-refused"]
    assert "restart-memory" in refused.detail
    write("", 4_000_000_000)  # the table emptied: every action follows mode again
    monitor.tick()
    assert monitor.actions.mode_of("restart-memory").mode == "enforce"


@pytest.mark.parametrize("mode", ["enforce", "observe"])
def test_each_measured_senior_is_recorded_once_as_its_speed_beside_the_newcomer(tmp_path, mode):
    fake, helper, samples, monitor = make(tmp_path, mode)
    running(fake, 1, fp="aaaa", start=FAKE_EPOCH)
    running(fake, 3, fp="cccc", start=FAKE_EPOCH, gpu=1)
    for t in range(10):
        samples.put(1, FAKE_EPOCH + t, throughput=20.0, started_at=FAKE_EPOCH)
        samples.put(3, FAKE_EPOCH + t, throughput=10.0, started_at=FAKE_EPOCH, gpu=1)
        monitor.tick()
    running(fake, 2, fp="bbbb", start=FAKE_EPOCH + 10)  # hurts job 1 (25 %)
    running(fake, 4, fp="dddd", start=FAKE_EPOCH + 10, gpu=1)  # job 3 keeps its speed
    for t in range(10, 16):
        samples.put(1, FAKE_EPOCH + t, throughput=15.0, started_at=FAKE_EPOCH)
        samples.put(2, FAKE_EPOCH + t, throughput=30.0, started_at=FAKE_EPOCH + 10)
        samples.put(3, FAKE_EPOCH + t, throughput=10.0, started_at=FAKE_EPOCH, gpu=1)
        samples.put(4, FAKE_EPOCH + t, throughput=5.0, started_at=FAKE_EPOCH + 10, gpu=1)
        monitor.tick()
    speeds = helper.store.pairs.pair_speeds()
    assert set(speeds) == {("aaaa", "bbbb"), ("cccc", "dddd")}
    assert speeds[("aaaa", "bbbb")].speed == pytest.approx(0.75)
    assert speeds[("cccc", "dddd")].speed == pytest.approx(1.0)
    assert {s.samples for s in speeds.values()} == {1}  # one measure per pack, not one per round
    assert fake.jobs[4].state == "RUNNING"
    assert fake.jobs[2].state == ("PENDING" if mode == "enforce" else "RUNNING")


def test_a_completed_runs_curve_is_stored_under_the_runs_key(tmp_path):
    from store.curves import RunCurves

    fake, helper, samples, monitor = make(tmp_path)
    running(fake, 9, fp="hist", shards=2)
    for t in range(5):
        samples.put(9, FAKE_EPOCH + t, mem=(3 + t) * GIB, util=40.0, started_at=FAKE_EPOCH)
        monitor.tick()
    fake.jobs[9].state = "COMPLETED"
    samples.now.clear()
    monitor.tick()
    (run,) = helper.store.runs("hist")
    curve = RunCurves(helper.store).of_job(9)
    assert curve is not None and (curve.fingerprint, curve.started_at) == ("hist", run.started_at)
    assert [p.mem_bytes for p in curve.points] == [(3 + t) * GIB for t in range(5)]
    assert [p.t for p in curve.points] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert curve.end_state == "COMPLETED" and curve.peak_bytes == run.peak_mem_bytes == 7 * GIB
    assert curve.capacity_label == "shard:2" and curve.capacity_bytes == 2 * helper.config().share_bytes


def test_a_requeued_runs_curve_is_stored_and_its_run_is_a_lower_bound(tmp_path):
    from store.curves import RunCurves

    fake, helper, samples, monitor = make(tmp_path)
    running(fake, 9, fp="hist")
    for t in range(3):
        samples.put(9, FAKE_EPOCH + t, mem=(2 + t) * GIB, started_at=FAKE_EPOCH)
        monitor.tick()
    fake.jobs[9].state = "PENDING"  # requeued
    samples.now.clear()
    monitor.tick()
    (run,) = helper.store.runs("hist")
    assert run.lower_bound and run.peak_mem_bytes == 4 * GIB
    curve = RunCurves(helper.store).of_job(9)
    assert curve.end_state == "PENDING" and "requeued" in curve.summary() and len(curve.points) == 3
    # it runs again before a round saw it wait: the first run's curve is kept all the same
    second = FAKE_EPOCH + 20
    running(fake, 9, fp="hist", start=second)
    samples.put(9, second, mem=GIB, started_at=second)
    monitor.tick()
    third = FAKE_EPOCH + 40
    running(fake, 9, fp="hist", start=third)
    samples.put(9, third, mem=GIB, started_at=third)
    monitor.tick()
    assert [c.started_at for c in RunCurves(helper.store).of_fingerprint("hist")] == [second, FAKE_EPOCH]


def test_curves_per_fingerprint_bounds_what_is_kept(tmp_path):
    from store.curves import RunCurves

    fake, helper, samples, monitor = make(tmp_path, curves_per_fingerprint=2)
    for job_id in (1, 2, 3):
        start = FAKE_EPOCH + 10 * job_id
        running(fake, job_id, fp="w", start=start)
        samples.put(job_id, start, mem=GIB, started_at=start)
        monitor.tick()
        fake.jobs[job_id].state = "COMPLETED"
        samples.now.clear()
        monitor.tick()
    assert [c.job_id for c in RunCurves(helper.store).of_fingerprint("w")] == [3, 2]
    assert len(helper.store.runs("w")) == 3  # the history itself is not pruned


def test_a_run_restarted_for_memory_keeps_its_curve_and_says_why_it_ended(tmp_path):
    from store.curves import RunCurves

    fake, helper, samples, monitor = make(tmp_path, memory_horizon_s=60)
    running(fake, 7, fp="grow", shards=1)  # one share = 10 GiB
    for t in range(40):
        samples.put(7, FAKE_EPOCH + t, mem=int(2 * GIB + t * 0.3 * GIB), started_at=FAKE_EPOCH)
        monitor.tick()
        if fake.jobs[7].state == "PENDING":
            break
    assert RunCurves(helper.store).of_job(7) is None  # stored by the history watch, on its next turn
    samples.now.clear()
    monitor.tick()
    curve = RunCurves(helper.store).of_job(7)
    assert curve is not None and curve.end_state == "REQUEUED by restart-memory"
    assert curve.how_it_ended == "requeued by restart-memory" and len(curve.points) == t + 1
    assert curve.capacity_label == "shard:1" and curve.peak_bytes == int(2 * GIB + t * 0.3 * GIB)
    (run,) = helper.store.runs("grow")  # what it reached before the restart: a lower bound
    assert run.lower_bound and run.end_state == "requeued by restart-memory" and run.started_at == curve.started_at
    assert len(RunCurves(helper.store).of_fingerprint("grow")) == 1  # one run, one curve (not again as PENDING)


def test_a_run_with_no_memory_measured_leaves_no_curve(tmp_path):
    from store.curves import RunCurves

    fake, helper, samples, monitor = make(tmp_path)
    running(fake, 9, fp="hist")
    samples.put(9, FAKE_EPOCH, mem=0, started_at=FAKE_EPOCH)
    monitor.tick()
    fake.jobs[9].state = "CANCELLED"
    samples.now.clear()
    monitor.tick()
    assert RunCurves(helper.store).of_job(9) is None


def test_curves_per_fingerprint_must_be_a_count(tmp_path):
    from packer.config import ConfigError
    from slurm_plugin.helper.monitor_settings import MonitorSettings, load_monitor_settings

    with pytest.raises(ConfigError, match=r"curves_per_fingerprint = -1 is not allowed: a whole number, >= 0"):
        MonitorSettings(curves_per_fingerprint=-1)
    toml = tmp_path / "gpupack.toml"
    toml.write_text("[monitor]\ncurves_per_fingerprint = 0\n")
    assert load_monitor_settings(toml).curves_per_fingerprint == 0


def test_a_typed_job_is_restarted_on_its_own_gpu_type(tmp_path):
    """`shard:h100:1` is restarted as `shard:h100:K` (it never comes back on
    another model); an untyped request stays untyped (22.05 refuses an update that types it)."""
    fake, helper, samples, monitor = make(tmp_path, memory_horizon_s=60)
    running(fake, 7, fp="typed", shards=1)
    fake.jobs[7].tres_per_node = "gres:shard:h100:1"  # as the submit path writes it
    for t in range(40):
        samples.put(7, FAKE_EPOCH + t, mem=int(2 * GIB + t * 0.3 * GIB), started_at=FAKE_EPOCH)
        monitor.tick()
        if fake.jobs[7].state == "PENDING":
            break
    assert fake.jobs[7].tres_per_node in ("gres:shard:h100:2", "gres:shard:h100:3", "gres:shard:h100:4")


def test_mps_jobs_in_a_mig_instance_are_planned_within_it(tmp_path):
    """Jobs sharing MIG instances through MPS (isolation ``mps:P@profile@start``): each
    instance's jobs are planned together, their percentages adding to 100 within it, apart
    from the other instance and the GPU's whole-GPU MPS jobs."""
    fake, helper, samples, monitor = make(tmp_path)
    for job in (1, 2, 3):
        running(fake, job, fp=f"m{job}", start=FAKE_EPOCH + job)
    samples.put(1, FAKE_EPOCH + 5, isolation="mps:33@3g.40gb@0", util=30.0, started_at=FAKE_EPOCH + 1)
    samples.put(2, FAKE_EPOCH + 5, isolation="mps:33@3g.40gb@0", util=50.0, started_at=FAKE_EPOCH + 2)
    samples.put(3, FAKE_EPOCH + 5, isolation="mps:33@3g.40gb@4", util=20.0, started_at=FAKE_EPOCH + 3)
    monitor.tick()
    plan = monitor.mps_plan
    assert set(plan) == {("node1", "0@3g.40gb@0"), ("node1", "0@3g.40gb@4")}
    pair = plan[("node1", "0@3g.40gb@0")]
    assert set(pair) == {1, 2} and sum(pair.values()) == 100 and pair[2] > pair[1]
    assert plan[("node1", "0@3g.40gb@4")] == {3: 100}
