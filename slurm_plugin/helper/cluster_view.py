"""How many whole GPUs are idle right now, from the last snapshot of the cluster.

The submit path must not run Slurm commands (slurmctld holds its locks while the shim
waits), so the watcher polls Slurm and publishes a snapshot that the submit side reads
(:mod:`slurm_plugin.helper.view_file`). Decisions made since that snapshot are counted as
reservations so a burst of submissions does not all count the same idle GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from packer.placement import Running, submit_exclusion
from slurm_plugin.helper.queue_state import QueueState

STALE = "STALE"  # not Slurm's: the node's agent is down, cut off or behind (nothing is packed there)
UNUSABLE_STATES = {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING", "FUTURE", "MAINTENANCE", "RESERVED", "POWERED_DOWN", "POWERING_DOWN", "INVALID_REG"}


@dataclass(frozen=True)
class NodeGpus:
    """One node's GPUs as Slurm sees them."""

    name: str
    states: frozenset[str]
    gpus: int
    busy: frozenset[int] = field(default_factory=frozenset)  # indexes held as gpu or shard

    @property
    def usable(self) -> bool:
        return not (self.states & UNUSABLE_STATES)

    @property
    def idle(self) -> int:
        return max(0, self.gpus - len(self.busy)) if self.usable else 0


@dataclass(frozen=True)
class Snapshot:
    nodes: tuple[NodeGpus, ...]
    pending_whole_gpu_jobs: int  # pending jobs that will take a whole GPU
    taken_at: float
    running: tuple[Running, ...] = ()  # running jobs, for submit-time pair avoidance
    queue: QueueState | None = None  # what the load-aware admission reads (None: not published)


def idle_gpus(snapshot: Snapshot, reservations: int = 0) -> int:
    free = sum(node.idle for node in snapshot.nodes)
    return max(0, free - snapshot.pending_whole_gpu_jobs - reservations)


def packing_exclusion(snapshot: Snapshot, fingerprint: str, partners: set[str]) -> frozenset[str] | None:
    """The nodes a job about to be packed is kept off: those running a job of a fingerprint in
    ``partners`` (never share a GPU) and those whose agent's figures are stale; None when that
    is every usable GPU node (the job is better kept whole)."""
    gpu_nodes = [n.name for n in snapshot.nodes if n.gpus > 0 and n.usable]
    avoid = submit_exclusion(fingerprint, snapshot.running, lambda _me, other: other in partners, gpu_nodes)
    stale = {n.name for n in snapshot.nodes if STALE in n.states and n.name in gpu_nodes}
    if avoid is None or not stale:
        return avoid
    avoid = frozenset(avoid) | stale
    return None if not set(gpu_nodes) - avoid else avoid

