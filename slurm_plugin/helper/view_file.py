"""The cluster view handed from the watcher process to the submit process, as a small file.

The watcher polls Slurm (big JSON documents, seconds of CPU on a busy queue) in its own
process, so the submit path never waits on its Python interpreter lock. After each poll it
writes a compact snapshot (`cluster-view.json`, a few hundred bytes per node) atomically;
the submit process looks at the file's modification time on each request (one `stat`) and
re-reads it only when it changed.

A snapshot older than `max_age_s` is not trusted: the answer is then the same as with no
view at all (one whole GPU counted idle, so jobs stay exclusive; the safe side).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

from store.jsonfile import write_json_atomic
from packer.decision import ClusterView
from packer.placement import Running
from slurm_plugin.helper.cluster_view import NodeGpus, Snapshot, idle_gpus
from slurm_plugin.helper.queue_state import QueueState

log = logging.getLogger(__name__)

VIEW_FILE = "cluster-view.json"
FORMAT = 1


def view_path(socket_path: Path) -> Path:
    """Where the view lives: beside the helper's socket (a root-owned run folder)."""
    return Path(socket_path).parent / VIEW_FILE


def snapshot_to_doc(snapshot: Snapshot) -> dict:
    return {
        "format": FORMAT,
        "taken_at": snapshot.taken_at,
        "pending_whole_gpu_jobs": snapshot.pending_whole_gpu_jobs,
        "nodes": [
            {"name": n.name, "states": sorted(n.states), "gpus": n.gpus, "busy": sorted(n.busy)}
            for n in snapshot.nodes
        ],
        "running": [
            {"job_id": r.job_id, "fp": r.fingerprint, "nodes": list(r.nodes), "packed": r.packed}
            for r in snapshot.running
        ],
        **({"queue": snapshot.queue.to_doc()} if snapshot.queue is not None else {}),
    }


def snapshot_from_doc(doc: dict) -> Snapshot:
    if doc.get("format") != FORMAT:
        raise ValueError(f"unknown cluster view format {doc.get('format')!r} (expected {FORMAT})")
    nodes = tuple(
        NodeGpus(str(n["name"]), frozenset(n["states"]), int(n["gpus"]), frozenset(int(i) for i in n["busy"]))
        for n in doc["nodes"]
    )
    running = tuple(
        Running(int(r["job_id"]), r.get("fp"), tuple(r["nodes"]), bool(r["packed"])) for r in doc.get("running", [])
    )
    queue = QueueState.from_doc(doc["queue"]) if doc.get("queue") is not None else None
    return Snapshot(nodes=nodes, pending_whole_gpu_jobs=int(doc["pending_whole_gpu_jobs"]),
                    taken_at=float(doc["taken_at"]), running=running, queue=queue)


def publish(path: Path, snapshot: Snapshot, watcher: dict | None = None) -> None:
    """Write the view; ``watcher``: the watcher's own figures (`round_load.RoundLoad.to_doc`: round
    and Slurm query times, whether rounds are stretched), kept under "watcher" for people and
    benches (the submit side does not read them)."""
    doc = snapshot_to_doc(snapshot)
    if watcher is not None:
        doc["watcher"] = watcher
    write_json_atomic(path, doc, mode=0o644)


class PublishedView:
    """The submit side's view: the last published snapshot minus the reservations made since."""

    def __init__(self, path: Path, max_age_s: float = 30.0, clock=time.time):
        self.path = Path(path)
        self.max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._snapshot: Snapshot | None = None
        self._free = 0  # idle whole GPUs in the snapshot, counted once when it is read
        self._reservations: list[float] = []
        self._complained: str | None = None

    def _complain(self, text: str) -> None:
        if text != self._complained:
            log.warning("%s; decisions keep jobs exclusive until a fresh view arrives", text)
            self._complained = text

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._complain(f"no cluster view at {self.path} yet (is the watcher running?)")
            return
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        try:
            snapshot = snapshot_from_doc(json.loads(self.path.read_bytes()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._complain(f"unreadable cluster view {self.path}: {exc}")
            return
        self._stamp = stamp
        self._snapshot = snapshot
        self._free = idle_gpus(snapshot)
        self._reservations = [t for t in self._reservations if t > snapshot.taken_at]

    def snapshot(self) -> Snapshot | None:
        """The last snapshot read, if it is fresh enough to be trusted."""
        with self._lock:
            return self._fresh()

    def _fresh(self) -> Snapshot | None:
        self._refresh()
        snap = self._snapshot
        if snap is None:
            return None
        age = self._clock() - snap.taken_at
        if age > self.max_age_s:
            self._complain(f"the cluster view is {age:.0f} s old (limit {self.max_age_s:.0f} s)")
            return None
        self._complained = None
        return snap

    def taken_at(self) -> float | None:
        """When the newest view readable was taken, fresh or not (None: no view yet)."""
        with self._lock:
            self._refresh()
            return self._snapshot.taken_at if self._snapshot is not None else None

    def reserve_whole_gpu(self) -> None:
        with self._lock:
            self._reservations.append(self._clock())

    def view(self) -> ClusterView:
        """Idle whole GPUs now: the snapshot's, less the reservations made since (on every
        submission, so the snapshot's count is kept, not summed over its nodes again)."""
        with self._lock:
            if self._fresh() is None:
                return ClusterView(idle_gpus=1)
            return ClusterView(idle_gpus=max(0, self._free - len(self._reservations)))

    def running(self) -> tuple[Running, ...]:
        snap = self.snapshot()
        return snap.running if snap is not None else ()
