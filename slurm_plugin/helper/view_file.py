"""The cluster view handed from the watcher process to the submit process, as a small file.

The watcher polls Slurm (big JSON documents, seconds of CPU on a busy queue) in its own
process, so the submit path never waits on its Python interpreter lock. After each poll it
writes a compact snapshot (`cluster-view.json`, a few hundred bytes per node) atomically.
The submit process reads it off the request path (:meth:`PublishedView.start_loader`): a
thread of its own looks at the file's modification time a few times a second, reads a new
one, counts its idle GPUs and runs the preparations the decision registered (the load-aware
admission's inputs), then hands the prepared snapshot over in one step. A request only
takes the last prepared snapshot and checks its age: at 2,000 nodes and 16,000 running jobs
the file is about 2 MB, whose reading took the first request after each round tens of ms.
Without the loader (tests, tools) a request reads a changed file itself, as before.

A snapshot older than `max_age_s` is not trusted: the answer is then the same as with no
view at all (one whole GPU counted idle, so jobs stay exclusive; the safe side).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from store.jsonfile import write_json_atomic
from packer.decision import ClusterView
from packer.placement import Running
from slurm_plugin.helper.cluster_view import NodeGpus, Snapshot, idle_gpus
from slurm_plugin.helper.queue_state import QueueState

log = logging.getLogger(__name__)

VIEW_FILE = "cluster-view.json"
FORMAT = 1
LOAD_EVERY_S = 0.2  # how often the loader looks at the file (the watcher publishes once a round)


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
        self._prepare: list[Callable[[Snapshot], None]] = []  # run by the loader on each new snapshot
        self._loader: threading.Thread | None = None
        self._stop = threading.Event()
        self.loads = 0  # snapshots read (the loader's, or a request's without it)
        self.load_s = 0.0  # the time they took, preparations included

    def on_new_snapshot(self, prepare: Callable[[Snapshot], None]) -> None:
        """Run ``prepare(snapshot)`` on each new snapshot before requests see it (a failure is
        logged, and the snapshot is handed over all the same)."""
        self._prepare.append(prepare)

    def start_loader(self, every_s: float = LOAD_EVERY_S) -> None:
        """Read new snapshots in a thread of their own from now on (requests no longer do)."""
        if self._loader is not None:
            return
        self._refresh()  # the first one before the first request
        self._loader = threading.Thread(target=self._load_loop, args=(every_s,), name="view-loader", daemon=True)
        self._loader.start()

    def stop_loader(self) -> None:
        self._stop.set()
        if self._loader is not None:
            self._loader.join(timeout=5)

    def _load_loop(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            try:
                self._refresh()
            except Exception:  # the loader must outlive a surprise; requests see the age grow
                log.exception("reading the cluster view failed")

    def _complain(self, text: str, kind: str | None = None) -> None:
        """Log ``text`` once while the trouble lasts (``kind``: what stays the same while it
        does, where the text changes, e.g. the view's age)."""
        key = kind or text
        if key != self._complained:
            log.warning("%s; decisions keep jobs exclusive until a fresh view arrives", text)
            self._complained = key

    def _refresh(self) -> None:
        """Read the file when it changed, prepare it, and hand it over (under the lock only
        for the hand-over: the reading never holds a request up on the lock)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._complain(f"no cluster view at {self.path} yet (is the watcher running?)")
            return
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        started = time.perf_counter()
        try:
            snapshot = snapshot_from_doc(json.loads(self.path.read_bytes()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._complain(f"unreadable cluster view {self.path}: {exc}")
            return
        free = idle_gpus(snapshot)
        for prepare in self._prepare:
            try:
                prepare(snapshot)
            except Exception:  # a preparation is an optimisation: its reader builds what it lacks
                log.exception("preparing the cluster view failed")
        with self._lock:
            if self._snapshot is not None and snapshot.taken_at < self._snapshot.taken_at:
                return  # a request and the loader read at once: the newer one stands
            self._stamp = stamp
            self._snapshot = snapshot
            self._free = free
            self._reservations = [t for t in self._reservations if t > snapshot.taken_at]
            self.loads += 1
            self.load_s += time.perf_counter() - started

    def snapshot(self) -> Snapshot | None:
        """The last snapshot read, if it is fresh enough to be trusted."""
        self._read_here()
        with self._lock:
            return self._fresh()

    def _read_here(self) -> None:
        """A request reads a changed file itself (before taking the lock) without the loader,
        and with it when the loader has not yet read the newest one (one `stat`): a job is
        never decided on a view older than the one published before it came (e.g. a node
        that went stale just before, left out of its exclusions)."""
        if self._loader is None:
            self._refresh()
            return
        try:
            st = os.stat(self.path)
        except OSError:
            return
        if (st.st_ino, st.st_mtime_ns, st.st_size) != self._stamp:
            self._refresh()

    def _fresh(self) -> Snapshot | None:
        snap = self._snapshot
        if snap is None:
            return None
        age = self._clock() - snap.taken_at
        if age > self.max_age_s:
            self._complain(f"the cluster view is {age:.0f} s old (limit {self.max_age_s:.0f} s)", "stale")
            return None
        self._complained = None
        return snap

    def taken_at(self) -> float | None:
        """When the newest view readable was taken, fresh or not (None: no view yet)."""
        self._read_here()
        with self._lock:
            return self._snapshot.taken_at if self._snapshot is not None else None

    def reserve_whole_gpu(self) -> None:
        with self._lock:
            self._reservations.append(self._clock())

    def view(self) -> ClusterView:
        """Idle whole GPUs now: the snapshot's, less the reservations made since (on every
        submission, so the snapshot's count is kept, not summed over its nodes again)."""
        self._read_here()
        with self._lock:
            if self._fresh() is None:
                return ClusterView(idle_gpus=1)
            return ClusterView(idle_gpus=max(0, self._free - len(self._reservations)))

    def running(self) -> tuple[Running, ...]:
        snap = self.snapshot()
        return snap.running if snap is not None else ()
