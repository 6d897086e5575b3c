"""How many whole GPUs are idle right now, kept fresh by a background poller.

The submit path must not run Slurm commands (slurmctld holds its locks while the shim
waits), so the helper polls in the background and answers from memory. Decisions made
since the last poll are remembered as reservations so a burst of submissions does not
all count the same idle GPU.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from packer.decision import ClusterView
from packer.placement import Running, submit_exclusion
from slurm_plugin.helper.queue_state import QueueState

log = logging.getLogger(__name__)

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


class ClusterViewPoller:
    """Polls `fetch` every `interval` seconds; `view()` answers at once from the last poll."""

    def __init__(self, fetch: Callable[[], Snapshot], interval: float = 2.0,
                 publish: Callable[[Snapshot], None] | None = None):
        self._fetch = fetch
        self._publish = publish
        self.interval = interval
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._reservations: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self) -> None:
        try:
            snapshot = self._fetch()
        except Exception as exc:  # Slurm hiccups: keep the last view, warn, go on
            log.warning("cluster poll failed, keeping the previous view: %s", exc)
            return
        with self._lock:
            self._snapshot = snapshot
            # reservations made before this poll started are now visible as pending jobs
            self._reservations = [t for t in self._reservations if t > snapshot.taken_at]
        if self._publish is not None:
            try:
                self._publish(snapshot)
            except OSError as exc:
                log.warning("cannot publish the cluster view: %s", exc)

    def reserve_whole_gpu(self) -> None:
        with self._lock:
            self._reservations.append(time.time())

    def view(self) -> ClusterView:
        with self._lock:
            if self._snapshot is None:
                # no view yet: say no GPU is idle is wrong as often as the opposite; be
                # conservative and keep jobs exclusive (1 idle GPU)
                return ClusterView(idle_gpus=1)
            return ClusterView(idle_gpus=idle_gpus(self._snapshot, len(self._reservations)))

    def start(self) -> None:
        self.poll_once()
        self._thread = threading.Thread(target=self._run, name="cluster-poll", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll_once()

    def stop(self) -> None:
        self._stop.set()
