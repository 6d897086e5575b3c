"""Fetch the cluster snapshot the helper answers from (the only Slurm I/O of the submit side)."""
from __future__ import annotations

import time
from pathlib import Path

from slurm_plugin.helper.cluster_view import NodeGpus, Snapshot
from slurm_plugin.slurm.model import Job, Node
from slurm_plugin.slurm.runner import SlurmRunner


def node_gpus(node: Node) -> NodeGpus:
    """A GPU is busy when Slurm shows it held whole (gpu) or in part (shard)."""
    busy: set[int] = set()
    for item in node.gres_used:
        if item.name in ("gpu", "shard") and item.indexes:
            busy.update(item.indexes)
    return NodeGpus(node.name, frozenset(s.upper() for s in node.state), node.gpus_total, frozenset(busy))


def pending_whole_gpus(jobs: list[Job]) -> int:
    """GPUs that pending, runnable jobs will take whole."""
    total = 0
    for job in jobs:
        if job.state != "PENDING" or job.held:
            continue
        for item in job.gres:
            if item.name == "gpu":
                total += item.count * max(1, job.node_count or 1) if item.per == "node" else item.count
    return total


def fetch_snapshot(slurm_conf: Path | None, runner: SlurmRunner | None = None) -> Snapshot:
    runner = runner or SlurmRunner(slurm_conf=str(slurm_conf) if slurm_conf else None, timeout=10)
    started = time.time()
    nodes = tuple(node_gpus(n) for n in runner.nodes())
    return Snapshot(nodes=nodes, pending_whole_gpu_jobs=pending_whole_gpus(runner.jobs()), taken_at=started)
