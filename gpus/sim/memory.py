"""The memory of the simulated GPUs: what each owner (a job) holds on a whole GPU or a MIG
device, its peak, and the refusals the hardware makes (out of memory, a whole-GPU allocation
while MIG is on).

A part of :class:`gpus.sim.backend.SimGpuBackend`, which gives ``_txn``, ``_locate`` and ``node``
(:class:`gpus.sim.store.SimGpuStore`).
"""
from __future__ import annotations

from mig.backend import ProcessMemory
from mig.errors import GpuOutOfMemoryError, MigEnabledError

MIB = 1024 * 1024


class SimMemory:
    """Memory records per device and owner: ``g["memory"][device_uuid][owner] = {current, peak}``."""

    @staticmethod
    def _used(g: dict, device_uuid: str) -> int:
        return sum(r["current"] for r in g["memory"].get(device_uuid, {}).values())

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
            self._check_mps_limit(g, device_uuid, owner, rec["current"], nbytes)
            rec["current"] += nbytes
            rec["peak"] = max(rec["peak"], rec["current"])
            return rec["current"]

    def _check_mps_limit(self, g: dict, device_uuid: str, owner: str, held: int, nbytes: int) -> None:
        """An MPS client may not pin more than its server's limit (the control daemon's
        ``set_*device_pinned_mem_limit``), whatever its own environment says."""
        proc = g.get("processes", {}).get(device_uuid, {}).get(owner) or {}
        limit = proc.get("mps_limit")
        if limit and held + nbytes > limit:
            raise GpuOutOfMemoryError(
                f"out of memory on {device_uuid} of {self.node}: MPS client {owner} asked for "
                f"{nbytes} bytes, holds {held} of its pinned device memory limit {limit}")

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
