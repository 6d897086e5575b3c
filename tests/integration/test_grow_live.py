"""Grow by preemption on the real cluster: the steps of
`gpupack demo --scenario grow`. The older packed job's memory grows; the helper requeues its
younger neighbour on the same GPU (held), restarts the older one at once on a larger share on
its node, then releases the neighbour at the head of the queue. Asserted through Slurm itself
(restart counts, node, GRES, start times) and the event log.

Uses `idle_cluster` of tests/integration/e2e_support.py (the session's `cluster`, emptied).
"""
from __future__ import annotations

import sys

import pytest

from slurm_plugin.cli.demo_grow import run_grow
from slurm_plugin.slurm.runner import SlurmRunner

pytestmark = pytest.mark.integration


def test_the_older_job_grows_in_place_after_its_younger_neighbour_is_evicted(idle_cluster):
    cluster = idle_cluster
    out = run_grow(cluster.env, cluster.workdir, cluster.spec.database, sys.executable, timeout=300)
    kinds = [e["kind"] for e in out.events]
    assert "restart-memory" not in kinds, out.events  # not the plain restart through the queue
    # the eviction order: the neighbour is requeued first, then the grower, then the neighbour released
    assert kinds.index("grow-evict") < kinds.index("grow-restart") < kinds.index("grow-release"), kinds
    evict = next(e for e in out.events if e["kind"] == "grow-evict")
    assert evict["job"] == out.neighbour and evict["data"]["grower"] == out.grower
    assert evict["data"]["pair_recorded"] is False
    restart = next(e for e in out.events if e["kind"] == "grow-restart")
    assert restart["job"] == out.grower and restart["data"]["evicted"] == [out.neighbour]
    assert restart["data"]["to_shards"] > restart["data"]["from_shards"] == 2
    assert set(restart["data"]["excluded"]) == {"node2", "node3"}  # pinned to its node

    # what Slurm says: the grower ran again, on node1, with the larger share, before the neighbour
    grower = SlurmRunner(env=cluster.env).job(out.grower)
    assert grower.base_state == "RUNNING" and grower.nodes == "node1" and (grower.restart_cnt or 0) >= 1
    assert [(g.name, g.count) for g in grower.gres] == [("shard", restart["data"]["to_shards"])]
    assert out.neighbour_restarts == 1
    # the neighbour either waits in the queue still, or started again only after the grower
    assert out.neighbour_state in ("PENDING", "RUNNING"), out.neighbour_state
    if out.neighbour_state == "RUNNING":
        assert out.neighbour_start >= out.grower_start > 0
    else:
        assert out.neighbour_start == 0.0
    assert out.ok
