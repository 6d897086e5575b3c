"""A simulated MIG GPU that keeps state and refuses exactly what the hardware refuses.

Used by the tests, the development cluster, the node agent and the simulated GPU
workloads. Two modes:

- in memory (``state_dir=None``): one process, for unit tests;
- persistent (``state_dir=DIR``): the node's GPUs live in ``DIR/<node>.json``; every
  operation takes ``fcntl.flock`` on ``DIR/<node>.lock`` around read-modify-write and
  replaces the file atomically, so several processes on one machine share one GPU view.

What it refuses, with the same error classes as the NVML backend: MIG operations with MIG
mode off (:class:`MigDisabledError`), a start the profile does not have
(:class:`InvalidPlacementError`), overlap or a full profile (:class:`PlacementOccupiedError`,
an :class:`InsufficientResourcesError`), destroying an instance that is busy or holds memory
(:class:`InUseError`), switching MIG mode while the GPU is in use (:class:`InUseError`),
whole-GPU memory allocation while MIG is on (:class:`MigEnabledError`), allocation past a
device's memory (:class:`GpuOutOfMemoryError`), and any change when read-only
(:class:`NoPermissionError`).
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

from mig.backend import GpuInfo, MigInstance, ProcessMemory
from mig.catalog import Catalog, load_catalog
from mig.errors import (
    BackendUnavailableError,
    GpuOutOfMemoryError,
    InUseError,
    MigDisabledError,
    MigEnabledError,
    MigError,
    NoPermissionError,
    NotFoundError,
)
from mig.fsm import PartitionState, get_space
from mig.jsonfile import write_json_atomic
from mig.sim_counters import CounterNoise, SimCounters

log = logging.getLogger(__name__)

MIB = 1024 * 1024
STATE_VERSION = 1
_NS = _uuid.UUID("6d1f0b8e-5c3a-4b8e-9a57-2f1d6c0e4a11")


def _gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{_uuid.uuid5(_NS, f'{node}/gpu{index}')}"


def _mig_uuid(gpu_uuid: str, gi_id: int, generation: int) -> str:
    return f"MIG-{_uuid.uuid5(_NS, f'{gpu_uuid}/gi{gi_id}/{generation}')}"


def new_state(node: str, gpus: Sequence[str], mig_enabled: bool = True) -> dict:
    """A fresh state document for ``node`` with GPUs of the given catalogue models."""
    out = []
    for i, model in enumerate(gpus):
        cat = load_catalog(model)
        out.append({
            "index": i,
            "model": cat.model,
            "uuid": _gpu_uuid(node, i),
            "memory_mib": cat.memory_mib,
            "mig_enabled": bool(mig_enabled),
            "generation": 0,
            "instances": [],
            "memory": {},
        })
    return {"version": STATE_VERSION, "node": node, "gpus": out}


class SimGpuBackend(SimCounters):
    """The simulated GPUs of one node (see the module docstring); its processes and their
    utilisation counters come from :class:`mig.sim_counters.SimCounters`."""

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
            yield doc
            if write:
                self._write(doc)

    def snapshot(self) -> dict:
        """A copy of the whole state document."""
        with self._txn() as doc:
            return copy.deepcopy(doc)

    # -- helpers ------------------------------------------------------------------------
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

    @staticmethod
    def _used(g: dict, device_uuid: str) -> int:
        return sum(r["current"] for r in g["memory"].get(device_uuid, {}).values())

    def _busy(self, g: dict, inst: dict) -> bool:
        return bool(inst.get("owner")) or self._used(g, inst["uuid"]) > 0

    def _to_instance(self, g: dict, inst: dict) -> MigInstance:
        return MigInstance(
            gpu_index=g["index"], gi_id=inst["gi_id"], profile=inst["profile"],
            start=inst["start"], size=inst["size"], ci_id=inst["ci_id"], uuid=inst["uuid"],
            memory_mib=inst["memory_mib"], busy=self._busy(g, inst), owner=inst.get("owner"),
        )

    # -- GpuBackend -----------------------------------------------------------------------
    def list_gpus(self) -> list[GpuInfo]:
        with self._txn() as doc:
            return [
                GpuInfo(g["index"], g["uuid"], g["model"], f"Simulated {g['model']}",
                        g["memory_mib"], g["mig_enabled"])
                for g in doc["gpus"]
            ]

    def catalog(self, gpu_index: int) -> Catalog:
        with self._txn() as doc:
            return load_catalog(self._gpu(doc, gpu_index)["model"])

    def mig_mode(self, gpu_index: int) -> bool:
        with self._txn() as doc:
            return bool(self._gpu(doc, gpu_index)["mig_enabled"])

    def set_mig_mode(self, gpu_index: int, enabled: bool) -> None:
        with self._txn(write=True) as doc:
            g = self._gpu(doc, gpu_index)
            if g["mig_enabled"] == enabled:
                return
            if g["instances"]:
                raise InUseError(
                    f"cannot switch MIG mode off on GPU {gpu_index} of {self.node}: "
                    f"{len(g['instances'])} GPU instances exist; destroy them first"
                )
            if self._used(g, g["uuid"]):
                raise InUseError(
                    f"cannot switch MIG mode on on GPU {gpu_index} of {self.node}: processes "
                    f"hold memory on the whole GPU; stop them first"
                )
            g["mig_enabled"] = bool(enabled)
            log.info("GPU %s of %s: MIG mode %s", gpu_index, self.node, "on" if enabled else "off")

    def list_instances(self, gpu_index: int) -> list[MigInstance]:
        with self._txn() as doc:
            g = self._gpu(doc, gpu_index)
            return [self._to_instance(g, i) for i in sorted(g["instances"], key=lambda i: i["gi_id"])]

    def partition_state(self, gpu_index: int,
                        profiles: tuple[str, ...] | None = None) -> PartitionState:
        """The partition state of one GPU (its instances as placements)."""
        with self._txn() as doc:
            g = self._gpu(doc, gpu_index)
            space = get_space(load_catalog(g["model"]), profiles)
            return PartitionState.from_placements(
                space, [(i["profile"], i["start"]) for i in g["instances"]])

    def create_instance(self, gpu_index: int, profile: str, start: int,
                        owner: str | None = None) -> MigInstance:
        with self._txn(write=True) as doc:
            g = self._gpu(doc, gpu_index)
            self._require_mig(g, f"create {profile}@{start}")
            cat = load_catalog(g["model"])
            state = PartitionState.from_placements(
                get_space(cat), [(i["profile"], i["start"]) for i in g["instances"]])
            try:
                state.alloc(profile, start)
            except MigError as exc:
                raise type(exc)(f"GPU {gpu_index} of {self.node}: {exc}") from exc
            prof = cat.profile(profile)
            used = {i["gi_id"] for i in g["instances"]}
            gi_id = next(n for n in range(1, len(used) + 2) if n not in used)
            g["generation"] += 1
            inst = {
                "gi_id": gi_id, "profile": profile, "start": start, "size": prof.memory_slices,
                "ci_id": 0, "uuid": _mig_uuid(g["uuid"], gi_id, g["generation"]),
                "memory_mib": prof.memory_mib, "owner": owner,
            }
            g["instances"].append(inst)
            log.info("GPU %s of %s: created %s@%s (GI %s, %s)", gpu_index, self.node, profile,
                     start, gi_id, inst["uuid"])
            return self._to_instance(g, inst)

    def destroy_instance(self, gpu_index: int, gi_id: int) -> None:
        with self._txn(write=True) as doc:
            g = self._gpu(doc, gpu_index)
            self._require_mig(g, f"destroy GPU instance {gi_id}")
            inst = self._instance(g, gi_id)
            if self._busy(g, inst):
                who = inst.get("owner") or ", ".join(sorted(g["memory"].get(inst["uuid"], {})))
                raise InUseError(
                    f"GPU {gpu_index} of {self.node}: {inst['profile']}@{inst['start']} "
                    f"(GI {gi_id}) is in use by {who}; wait for it to end or stop it first"
                )
            g["instances"].remove(inst)
            g["memory"].pop(inst["uuid"], None)
            g.get("processes", {}).pop(inst["uuid"], None)
            log.info("GPU %s of %s: destroyed %s@%s (GI %s)", gpu_index, self.node,
                     inst["profile"], inst["start"], gi_id)

    def device_uuids(self, gpu_index: int) -> dict[int, str]:
        with self._txn() as doc:
            g = self._gpu(doc, gpu_index)
            return {i["gi_id"]: i["uuid"] for i in g["instances"]}

    def process_memory(self, gpu_index: int, gi_id: int | None = None) -> list[ProcessMemory]:
        with self._txn() as doc:
            g = self._gpu(doc, gpu_index)
            dev = g["uuid"] if gi_id is None else self._instance(g, gi_id)["uuid"]
            return self._usage(g, dev)

    # -- simulator extras -----------------------------------------------------------------
    def set_owner(self, gpu_index: int, gi_id: int, owner: str | None) -> None:
        """Mark an instance busy (owned by a job) or idle (``owner=None``)."""
        with self._txn(write=True) as doc:
            g = self._gpu(doc, gpu_index)
            self._instance(g, gi_id)["owner"] = owner

    def find_device(self, device_uuid: str) -> tuple[int, int | None]:
        """(gpu index, GI id or None for a whole GPU) of a ``GPU-…`` or ``MIG-…`` UUID."""
        with self._txn() as doc:
            return self._locate(doc, device_uuid)[0:2]  # type: ignore[return-value]

    def _locate(self, doc: dict, device_uuid: str) -> tuple[int, int | None, dict, dict | None]:
        for g in doc["gpus"]:
            if g["uuid"] == device_uuid:
                return g["index"], None, g, None
            for inst in g["instances"]:
                if inst["uuid"] == device_uuid:
                    return g["index"], inst["gi_id"], g, inst
        raise NotFoundError(f"no GPU or MIG device {device_uuid} on {self.node}")

    def _usage(self, g: dict, dev: str) -> list[ProcessMemory]:
        return [
            ProcessMemory(dev, owner, r["current"], r["peak"])
            for owner, r in sorted(g["memory"].get(dev, {}).items())
            if r["current"] > 0
        ]

    def alloc_memory(self, device_uuid: str, owner: str, nbytes: int) -> int:
        """Allocate ``nbytes`` on a whole GPU or MIG device for ``owner``; returns its total."""
        if nbytes < 0:
            raise ValueError("nbytes must be >= 0")
        with self._txn(write=True) as doc:
            idx, gi_id, g, inst = self._locate(doc, device_uuid)
            if inst is None and g["mig_enabled"]:
                raise MigEnabledError(
                    f"GPU {idx} of {self.node} is in MIG mode: allocate on one of its MIG "
                    f"devices ({', '.join(i['uuid'] for i in g['instances']) or 'none yet'}), "
                    f"not on {device_uuid}"
                )
            capacity = (inst or g)["memory_mib"] * MIB
            used = self._used(g, device_uuid)
            if used + nbytes > capacity:
                where = f"{inst['profile']} (GI {gi_id})" if inst else "the whole GPU"
                raise GpuOutOfMemoryError(
                    f"out of memory on GPU {idx} of {self.node}, {where} {device_uuid}: "
                    f"{owner} asked for {nbytes} bytes, {capacity - used} of {capacity} are "
                    f"free; restart the job on a larger partition"
                )
            rec = g["memory"].setdefault(device_uuid, {}).setdefault(
                owner, {"current": 0, "peak": 0})
            rec["current"] += nbytes
            rec["peak"] = max(rec["peak"], rec["current"])
            return rec["current"]

    def free_memory(self, device_uuid: str, owner: str, nbytes: int | None = None) -> int:
        """Free ``nbytes`` (all when None) of ``owner`` on a device; returns what it still holds.

        The owner's peak stays readable through :meth:`memory_of` until :meth:`forget`.
        """
        with self._txn(write=True) as doc:
            _, _, g, _ = self._locate(doc, device_uuid)
            rec = g["memory"].get(device_uuid, {}).get(owner)
            if rec is None:
                return 0
            rec["current"] = 0 if nbytes is None else max(0, rec["current"] - nbytes)
            return rec["current"]

    def memory_usage(self, device_uuid: str) -> list[ProcessMemory]:
        """Current (and peak) bytes per owner on one device."""
        with self._txn() as doc:
            _, _, g, _ = self._locate(doc, device_uuid)
            return self._usage(g, device_uuid)

    def memory_of(self, owner: str) -> dict[str, dict[str, int]]:
        """``{device_uuid: {"current": b, "peak": b}}`` for one owner across the node."""
        out: dict[str, dict[str, int]] = {}
        with self._txn() as doc:
            for g in doc["gpus"]:
                for dev, owners in g["memory"].items():
                    if owner in owners:
                        out[dev] = dict(owners[owner])
        return out

    def forget(self, owner: str) -> None:
        """Drop every memory record of ``owner`` (after its job ended and was recorded)."""
        with self._txn(write=True) as doc:
            for g in doc["gpus"]:
                for procs in g.get("processes", {}).values():
                    procs.pop(owner, None)
                for dev, owners in g["memory"].items():
                    rec = owners.get(owner)
                    if rec is not None and rec["current"] == 0:
                        del owners[owner]
