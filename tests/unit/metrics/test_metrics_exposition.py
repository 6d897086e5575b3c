"""Every daemon's metrics parse with prometheus_client's own parser and carry gpupack_ families."""
from __future__ import annotations

import math
import urllib.request
from unittest import mock

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpus.sim.backend import SimGpuBackend
from mig.errors import CountersUnavailableError
from packer.config import GIB, PackerConfig
from packer.decision import ClusterView
from packer.fingerprint import fingerprint
from store.db import RunRecord, Store
from prometheus_client import generate_latest
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.state import BATCH_STEP
from slurm_plugin.helper.submit_service import SubmitService
from fixed_view import FixedView
from slurm_plugin.metrics.agent import agent_registry
from slurm_plugin.metrics.endpoint import MetricsEndpoint, MetricsEndpointError, new_registry
from slurm_plugin.metrics.ports import Address
from slurm_plugin.metrics.submit import SubmitMetrics
from slurm_plugin.metrics.watcher import EventLogCollector

SHARD2 = {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0", "SLURM_SHARDS_ON_NODE": "2"}


def parse(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families: dict, family: str, suffix: str = "", **labels) -> float:
    """The one sample of `family` (name + suffix) whose labels include `labels`."""
    hits = [s.value for s in families[family].samples
            if s.name == family + suffix and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (family, suffix, labels, families[family].samples)
    return hits[0]


# -- submit side ------------------------------------------------------------------------------
def submit_side(store, taken_at=None, kill=None, mode="enforce", now=1000.0):
    metrics = SubmitMetrics(new_registry())
    metrics.watch_state(lambda: taken_at, lambda: mode, kill, lambda: now)
    cfg = PackerConfig(mode=mode)
    return SubmitService(lambda: cfg, store, FixedView(ClusterView(0)), kill, metrics=metrics), metrics


def test_submit_side_counts_decisions_and_their_latency(tmp_path):
    store = Store()
    body = b"#!/bin/sh\ntrain\n"
    store.record_run(RunRecord(1, fingerprint("alice", "t", body), int(7.6 * GIB), 35.0))
    service, metrics = submit_side(store, taken_at=990.0)
    service.answer({"user_name": b"alice", "name": b"t", "script": body, "tres_per_node": b"gres:gpu:1"})
    service.answer({"user_name": b"bob", "name": b"new", "script": b"x", "tres_per_node": b"gres:gpu:1"})
    service.answer({"user_name": b"bob", "name": b"cpu", "script": b"x"})
    f = parse(generate_latest(metrics.registry).decode())
    assert value(f, "gpupack_decisions", "_total", verdict="packed", reason="fits") == 1
    exclusive = [s for s in f["gpupack_decisions"].samples if s.name.endswith("_total") and s.labels["verdict"] == "exclusive"]
    assert sum(s.value for s in exclusive) == 1 and exclusive[0].labels["reason"] == "no-history"
    assert value(f, "gpupack_decisions", "_total", verdict="untouched", reason="no-gpu") == 1
    assert f["gpupack_submit_decision_seconds"].type == "histogram"
    assert value(f, "gpupack_submit_decision_seconds", "_count") == 3
    assert 0 < value(f, "gpupack_submit_decision_seconds", "_sum") < 3.0
    assert value(f, "gpupack_submit_decision_seconds", "_bucket", le="+Inf") == 3
    assert value(f, "gpupack_cluster_view_age_seconds") == 10.0
    assert value(f, "gpupack_mode", mode="enforce") == 1 and value(f, "gpupack_mode", mode="observe") == 0
    assert value(f, "gpupack_kill_switch") == 0
    assert "process_cpu_seconds" in f  # the standard process families come along


def test_submit_side_without_a_view_and_with_the_kill_switch(tmp_path):
    kill = tmp_path / "gpupack.disable"
    kill.touch()
    service, metrics = submit_side(Store(), taken_at=None, kill=kill, mode="observe")
    assert service.answer({"user_name": b"a", "tres_per_node": b"gres:gpu:1"}).reason == "kill-switch"
    f = parse(generate_latest(metrics.registry).decode())
    assert math.isinf(value(f, "gpupack_cluster_view_age_seconds"))
    assert value(f, "gpupack_kill_switch") == 1 and value(f, "gpupack_mode", mode="observe") == 1
    assert value(f, "gpupack_decisions", "_total", verdict="untouched", reason="kill-switch") == 1
    assert value(f, "gpupack_submit_decision_seconds", "_count") == 1


# -- watcher ----------------------------------------------------------------------------------
def watcher_text(collector) -> str:
    registry = new_registry()
    registry.register(collector)
    return generate_latest(registry).decode()


def test_watcher_counts_actions_by_mode_and_reads_only_new_events(tmp_path):
    store = Store(tmp_path / "gpupack.db")
    store.log_event("requeue-contention", "job 4 slowed job 3 by 40%", 4)
    store.log_event("requeue-contention", "would requeue (observe mode): job 6 slowed job 5", 6)
    store.log_event("restart-memory", "memory will outgrow shard:2", 7)
    store.log_event("requeue-quirk-failed", "could not requeue: boom", 8)
    store.log_event("mig-reconfigure", "node1: ...", None, changes=[{"op": "create"}, {"op": "destroy"}])
    store.log_event("history", "recorded", 9)
    collector = EventLogCollector(store)
    f = parse(watcher_text(collector))
    assert value(f, "gpupack_requeues", "_total", kind="contention") == 1
    assert value(f, "gpupack_restarts", "_total", kind="memory") == 1
    assert value(f, "gpupack_actions", "_total", action="requeue-contention", mode="shadow") == 1
    assert value(f, "gpupack_actions", "_total", action="requeue-contention", mode="enforce") == 1
    assert value(f, "gpupack_action_failures", "_total", action="requeue-quirk") == 1
    assert value(f, "gpupack_mig_layout_changes", "_total") == 2
    assert value(f, "gpupack_history_records", "_total") == 1
    first_id = collector.totals.last_id
    store.log_event("requeue-contention", "again", 10)
    store.log_event("restart-memory", "x", 11, shadow=True)
    f = parse(watcher_text(collector))
    assert value(f, "gpupack_requeues", "_total", kind="contention") == 2
    assert value(f, "gpupack_actions", "_total", action="restart-memory", mode="shadow") == 1
    assert value(f, "gpupack_restarts", "_total", kind="memory") == 1
    assert collector.totals.last_id == first_id + 2


def test_grow_and_regroup_moves_count_as_actions(tmp_path):
    """Grow by preemption and regrouping requeue or restart running jobs: each move counts in
    gpupack_requeues/restarts_total (enforced) and gpupack_actions_total by mode."""
    store = Store(tmp_path / "gpupack.db")
    store.log_event("grow-evict", "evicted for job 3", 4)
    store.log_event("grow-evict", "would requeue (shadow mode): evicted for job 5", 6, shadow=True)
    store.log_event("grow-restart", "restarts bigger in place", 3)
    store.log_event("regroup-requeue", "moved after its checkpoint", 7)
    store.log_event("regroup-requeue-failed", "could not requeue: boom", 8)
    f = parse(watcher_text(EventLogCollector(store)))
    assert value(f, "gpupack_requeues", "_total", kind="grow-evict") == 1
    assert value(f, "gpupack_restarts", "_total", kind="grow") == 1
    assert value(f, "gpupack_requeues", "_total", kind="regroup") == 1
    assert value(f, "gpupack_actions", "_total", action="grow-evict", mode="shadow") == 1
    assert value(f, "gpupack_actions", "_total", action="grow-evict", mode="enforce") == 1
    assert value(f, "gpupack_action_failures", "_total", action="regroup-requeue") == 1


def test_every_family_is_prefixed_and_has_help(tmp_path):
    store = Store(tmp_path / "gpupack.db")
    f = parse(watcher_text(EventLogCollector(store)))
    ours = [name for name in f if not name.startswith(("process_", "python_"))]
    assert ours and all(name.startswith("gpupack_") for name in ours)
    assert all(f[name].documentation for name in ours)


# -- node agent -------------------------------------------------------------------------------
def test_agent_reports_shares_and_slices_per_gpu(tmp_path):
    backend = SimGpuBackend(tmp_path / "sim", "node1", gpus=["H100-80GB", "H100-80GB"])
    agent = NodeAgent("node1", tmp_path, backend, list_running_jobs=lambda: {7, 8}, sim_dir=tmp_path / "sim")
    agent.isolate(7, BATCH_STEP, 1000, SHARD2)
    agent.isolate(8, BATCH_STEP, 1000, {"SLURM_JOB_GPUS": "1", "CUDA_VISIBLE_DEVICES": "1"})
    f = parse(generate_latest(agent_registry(agent)).decode())
    assert value(f, "gpupack_gpu_shares", node="node1", gpu="0") == 5  # the H100's share ladder
    assert value(f, "gpupack_gpu_shares_in_use", node="node1", gpu="0") == 2
    assert value(f, "gpupack_gpu_shares_in_use", node="node1", gpu="1") == 5  # a whole GPU holds every share
    assert value(f, "gpupack_gpu_mig_slices", node="node1", gpu="0") == 8
    assert value(f, "gpupack_gpu_mig_slices_in_use", node="node1", gpu="0") == 2  # 1g.20gb: two 10 GB slices
    assert value(f, "gpupack_gpu_mig_slices_in_use", node="node1", gpu="1") == 8  # 7g.80gb
    assert value(f, "gpupack_gpu_mig_slices_idle", node="node1", gpu="0") == 0
    assert value(f, "gpupack_gpu_jobs", node="node1", gpu="0") == 1
    assert value(f, "gpupack_node_jobs", node="node1", isolation="mig") == 1
    assert value(f, "gpupack_node_jobs", node="node1", isolation="whole") == 1
    before = value(f, "gpupack_mig_reconfigurations", "_total", node="node1")
    assert before == 2  # the 1g.20gb made for job 7, the 7g.80gb for whole-GPU job 8 (every instance made counts)
    changes = agent.follow_queue("in-order", [2, 2])  # idle slices made ready for the queue
    f = parse(generate_latest(agent_registry(agent)).decode())
    assert changes and value(f, "gpupack_gpu_mig_slices_idle", node="node1", gpu="0") > 0
    assert value(f, "gpupack_mig_reconfigurations", "_total", node="node1") == before + len(changes)
    assert not f["gpupack_gpu_util_counters_unavailable"].samples  # nothing sampled yet
    # a node without DCGM: the MIG slice's activity cannot be read; the metric says so, by reason
    refusal = CountersUnavailableError("no dcgmi here", reason="no-dcgm")
    with mock.patch.object(backend, "instance_activity", side_effect=refusal):
        agent.sampler.sample_all(list(agent.jobs.values()), 1000.0)
    f = parse(generate_latest(agent_registry(agent)).decode())
    assert value(f, "gpupack_gpu_util_counters_unavailable", node="node1", gpu="0", reason="no-dcgm") == 1
    assert agent.sampler.recent[7][-1].util_source == "unavailable: no-dcgm: no dcgmi here"


# -- the endpoint -----------------------------------------------------------------------------
def test_endpoint_serves_the_registry_and_says_when_the_port_is_taken():
    metrics = SubmitMetrics(new_registry())
    metrics.observe("packed", "fits", 0.0003)
    endpoint = MetricsEndpoint(Address("127.0.0.1", 0), metrics.registry)
    try:
        with urllib.request.urlopen(endpoint.url, timeout=5) as reply:
            f = parse(reply.read().decode())
        assert value(f, "gpupack_submit_decision_seconds", "_count") == 1
        with pytest.raises(MetricsEndpointError, match="another daemon on this port"):
            MetricsEndpoint(endpoint.address, new_registry())
    finally:
        endpoint.stop()
