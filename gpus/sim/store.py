"""Where the simulated GPUs of a node keep their state, and the locking around it.

- in memory (``state_dir=None``): one process, for unit tests;
- persistent (``state_dir=DIR``): the node's GPUs live in ``DIR/<node>.json``; every
  operation takes ``fcntl.flock`` on ``DIR/<node>.lock`` around read-modify-write and
  replaces the file atomically, so several processes on one machine share one GPU view;
  the driver's MIG capability files of its instances are kept in ``DIR/<node>.driver``
  (:mod:`gpus.sim.caps`).

:class:`SimGpuStore` is the base of :class:`gpus.sim.backend.SimGpuBackend`: it gives its
parts (instances, :class:`gpus.sim.memory.SimMemory`, :class:`gpus.sim.counters.SimCounters`)
the state document in a transaction (``_txn``) and the look-ups in it (``_gpu``,
``_instance``, ``_locate``, ``_require_mig``).
"""
from __future__ import annotations

import copy
import fcntl
import json
import logging
import os
import threading
import time
import uuid as _uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from mig.catalog import load_catalog
from mig.errors import BackendUnavailableError, MigDisabledError, NoPermissionError, NotFoundError
from store.jsonfile import write_json_atomic
from gpus.nvml.caps import DriverFiles
from gpus.sim import caps
from gpus.sim.counters import CounterNoise

log = logging.getLogger(__name__)

STATE_VERSION = 1
_NS = _uuid.UUID("6d1f0b8e-5c3a-4b8e-9a57-2f1d6c0e4a11")


def _gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{_uuid.uuid5(_NS, f'{node}/gpu{index}')}"


def mig_device_uuid(gpu_uuid: str, gi_id: int, generation: int) -> str:
    return f"MIG-{_uuid.uuid5(_NS, f'{gpu_uuid}/gi{gi_id}/{generation}')}"


def new_state(node: str, gpus: Sequence[str], mig_enabled: bool = True) -> dict:
    """A fresh state document for ``node`` with GPUs of the given catalogue models."""
    out = []
    for i, model in enumerate(gpus):
        cat = load_catalog(model)
        out.append({
            "index": i,
            "minor": i,  # /dev/nvidia<minor> (a real driver's may differ from the index)
            "model": cat.model,
            "uuid": _gpu_uuid(node, i),
            "memory_mib": cat.memory_mib,
            "mig_enabled": bool(mig_enabled),
            "generation": 0,
            "instances": [],
            "memory": {},
        })
    return {"version": STATE_VERSION, "node": node, "gpus": out}


class SimGpuStore:
    """The state document of one node's simulated GPUs, in memory or in a locked file."""

    def __init__(self, state_dir: str | os.PathLike | None = None, node: str = "node0",
                 gpus: Sequence[str] | None = None, mig_enabled: bool = True,
                 read_only: bool = False, clock=time.time,
                 noise: CounterNoise | None = None):
        self.node = node
        self.read_only = read_only
        self.clock = clock
        self.noise = noise or CounterNoise()
        self._lock = threading.RLock()
        self._path: Path | None = None
        self._mem: dict | None = None
        if state_dir is None:
            self._mem = new_state(node, gpus or ["H100-80GB"], mig_enabled)
            return
        directory = Path(state_dir)
        self._path = directory / f"{node}.json"
        if gpus is not None:
            directory.mkdir(parents=True, exist_ok=True)
            with self._file_lock(exclusive=True):
                if not self._path.exists():
                    self._write(new_state(node, gpus, mig_enabled))
                    log.info("created simulated GPUs %s for %s in %s", list(gpus), node, self._path)
                self._sync_caps(self._read(), None)  # also for a state kept from before
        elif not self._path.exists():
            raise BackendUnavailableError(
                f"no simulated GPU state for node {node!r} at {self._path}; create it with "
                f"SimGpuBackend(state_dir, node, gpus=[...]) or `gpupack mig show --backend sim "
                f"--sim-gpus H100-80GB`"
            )

    @property
    def state_path(self) -> Path | None:
        return self._path

    # -- storage ------------------------------------------------------------------------
    @contextmanager
    def _file_lock(self, exclusive: bool) -> Iterator[None]:
        assert self._path is not None
        fd = os.open(self._path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _read(self) -> dict:
        assert self._path is not None
        with open(self._path, encoding="utf-8") as fh:
            doc = json.load(fh)
        if doc.get("version") != STATE_VERSION:
            raise BackendUnavailableError(
                f"{self._path} holds simulated GPU state version {doc.get('version')!r}, "
                f"this code reads version {STATE_VERSION}; remove the file to start afresh"
            )
        return doc

    def _write(self, doc: dict) -> None:
        assert self._path is not None
        write_json_atomic(self._path, doc)

    @contextmanager
    def _txn(self, write: bool = False) -> Iterator[dict]:
        """The state document, locked; changes are kept only when the block succeeds."""
        if write and self.read_only:
            raise NoPermissionError(
                f"simulated GPUs of {self.node} are read-only (like NVML without root); "
                f"run as root or open the backend with read_only=False"
            )
        if self._path is None:
            with self._lock:
                if not write:
                    yield self._mem  # type: ignore[misc]
                    return
                work = copy.deepcopy(self._mem)
                yield work  # type: ignore[misc]
                self._mem = work
            return
        with self._lock, self._file_lock(exclusive=write):
            doc = self._read()
            before = caps.wanted_caps(doc) if write else None
            yield doc
            if write:
                self._write(doc)
                self._sync_caps(doc, before)

    def _sync_caps(self, doc: dict, before: frozenset | None) -> None:
        """The driver's capability files follow the instances: rewritten by the process that
        changed them (a workload, which changes none, may be fenced from the folder)."""
        assert self._path is not None
        wanted = caps.wanted_caps(doc)
        if wanted != before:
            caps.sync(DriverFiles.for_node(self._path.parent, self.node), doc, wanted)

    def document(self, write: bool = False):
        """The state document in a transaction, for the simulated NVML library
        (:mod:`gpus.sim.nvml.shared`), which keeps its own model of it."""
        return self._txn(write)

    def snapshot(self) -> dict:
        """A copy of the whole state document."""
        with self._txn() as doc:
            return copy.deepcopy(doc)

    # -- look-ups in the document -------------------------------------------------------
    def _gpu(self, doc: dict, gpu_index: int) -> dict:
        for g in doc["gpus"]:
            if g["index"] == gpu_index:
                return g
        raise NotFoundError(
            f"no GPU {gpu_index} on {self.node}; it has GPUs "
            f"{', '.join(str(g['index']) for g in doc['gpus']) or 'none'}"
        )

    def _require_mig(self, g: dict, what: str) -> None:
        if not g["mig_enabled"]:
            raise MigDisabledError(
                f"cannot {what} on GPU {g['index']} ({g['model']}) of {self.node}: MIG mode is "
                f"off; enable it first (`nvidia-smi -i {g['index']} -mig 1`, or set_mig_mode)"
            )

    def _instance(self, g: dict, gi_id: int) -> dict:
        for inst in g["instances"]:
            if inst["gi_id"] == gi_id:
                return inst
        raise NotFoundError(
            f"no GPU instance {gi_id} on GPU {g['index']} of {self.node}; it has "
            f"{', '.join(str(i['gi_id']) for i in g['instances']) or 'none'}"
        )

    def _locate(self, doc: dict, device_uuid: str) -> tuple[int, int | None, dict, dict | None]:
        for g in doc["gpus"]:
            if g["uuid"] == device_uuid:
                return g["index"], None, g, None
            for inst in g["instances"]:
                if inst["uuid"] == device_uuid:
                    return g["index"], inst["gi_id"], g, inst
        raise NotFoundError(f"no GPU or MIG device {device_uuid} on {self.node}")

