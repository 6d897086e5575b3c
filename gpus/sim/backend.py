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
device's memory or past an MPS client's pinned memory limit (its MPS control daemon's,
:mod:`gpus.sim.mps_control`) (:class:`GpuOutOfMemoryError`), a CUDA context its compute mode does not allow
(:class:`DevicesUnavailableError`), and any change when read-only
(:class:`NoPermissionError`).
"""
from __future__ import annotations

import logging

from mig.backend import GpuInfo, MigInstance, ProcessMemory
from mig.catalog import Catalog, load_catalog
from mig.errors import InUseError, MigError
from mig.fsm import PartitionState, get_space
from gpus.sim.caps import device_minor
from gpus.sim.compute_mode import SimComputeMode
from gpus.sim.counters import SimCounters
from gpus.sim.memory import MIB, SimMemory
from gpus.sim.store import STATE_VERSION, SimGpuStore, mig_device_uuid, new_state

log = logging.getLogger(__name__)

__all__ = ["MIB", "STATE_VERSION", "SimGpuBackend", "new_state"]


class SimGpuBackend(SimMemory, SimCounters, SimComputeMode, SimGpuStore):
    """The simulated GPUs of one node (see the module docstring): MIG mode and instances here;
    the state document and its locking in :class:`gpus.sim.store.SimGpuStore`, memory in
    :class:`gpus.sim.memory.SimMemory`, processes and their utilisation counters in
    :class:`gpus.sim.counters.SimCounters`, compute modes in :class:`gpus.sim.compute_mode.SimComputeMode`."""

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
                "ci_id": 0, "uuid": mig_device_uuid(g["uuid"], gi_id, g["generation"]),
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
            g.get("mps_servers", {}).pop(inst["uuid"], None)
            g.get("compute_modes", {}).pop(inst["uuid"], None)
            log.info("GPU %s of %s: destroyed %s@%s (GI %s)", gpu_index, self.node,
                     inst["profile"], inst["start"], gi_id)

    def device_minor(self, gpu_index: int) -> int:
        with self._txn() as doc:
            return device_minor(self._gpu(doc, gpu_index))

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
