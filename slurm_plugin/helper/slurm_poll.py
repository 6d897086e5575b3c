"""The cluster snapshot the submit side answers from, made from what Slurm said (the watcher asks
Slurm and publishes it; the submit side runs no Slurm command)."""
from __future__ import annotations

from collections.abc import Collection

from packer import comment
from packer.placement import Running
from slurm_plugin.helper.cluster_view import STALE, NodeGpus, Snapshot
from slurm_plugin.helper.queue_state import queue_state
from slurm_plugin.slurm.gres import expand_hostlist
from slurm_plugin.slurm.model import Job, Node

ACTIVE = ("RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING")


def node_gpus(node: Node, stale: bool = False) -> NodeGpus:
    """A GPU is busy when Slurm shows it held whole (gpu) or in part (shard); a node whose
    agent's figures are stale carries the state STALE (nothing is packed onto it)."""
    busy: set[int] = set()
    for item in node.gres_used:
        if item.name in ("gpu", "shard") and item.indexes:
            busy.update(item.indexes)
    states = frozenset(s.upper() for s in node.state) | ({STALE} if stale else frozenset())
    return NodeGpus(node.name, states, node.gpus_total, frozenset(busy))


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


def running_jobs(jobs: list[Job]) -> tuple[Running, ...]:
    """Running jobs with the fingerprint their AdminComment record carries."""
    out = []
    for job in jobs:
        if job.state not in ACTIVE:
            continue
        record = comment.parse(job.admin_comment)
        packed = any(item.name == "shard" for item in (*job.gres_detail, *job.gres))
        out.append(Running(job.job_id, record.fingerprint if record else None, expand_hostlist(job.nodes), packed))
    return tuple(out)


def snapshot_from(nodes: list[Node], jobs: list[Job], taken_at: float,
                  stale: Collection[str] = ()) -> Snapshot:
    """The view from what Slurm said; `taken_at`: when the job listing was asked for; `stale`:
    nodes whose agent's figures are stale (the monitor's)."""
    gpus = tuple(node_gpus(n, n.name in stale) for n in nodes)
    return Snapshot(nodes=gpus, pending_whole_gpu_jobs=pending_whole_gpus(jobs),
                    taken_at=taken_at, running=running_jobs(jobs),
                    queue=queue_state(jobs, sum(g.gpus for g in gpus if g.usable), taken_at))
