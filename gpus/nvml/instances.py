"""MIG instances on a GPU through NVML: list, create, destroy; the MIG devices they expose.

Each GPU instance gets one full-size compute instance (shared engines), created at a
placement whose ``size`` is in memory slices; destroy removes the compute instances
first, then the GPU instance. A half-made instance is rolled back.
"""
from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from typing import Any

from mig.backend import MigInstance
from mig.catalog import Catalog
from mig.errors import InvalidPlacementError, MigError
from gpus.nvml.session import NvmlSession, text

log = logging.getLogger(__name__)

CI_SLICES = (1, 2, 3, 4, 6, 7, 8)  # compute slices with an NVML_COMPUTE_INSTANCE_PROFILE_*


class NvmlInstances:
    """The GPU instances (with their compute instance) of this node's MIG-mode GPUs."""

    def __init__(self, session: NvmlSession, catalog: Callable[[int], Catalog]):
        self.session = session
        self.catalog = catalog

    def mig_devices(self, handle, gpu_index: int) -> dict[int, tuple[Any, str, int]]:
        """{GI id: (MIG device handle, MIG-uuid, CI id)}."""
        s = self.session
        nv = s.nv
        out = {}
        n = s.call(nv.nvmlDeviceGetMaxMigDeviceCount, handle,
                   what=f"GPU {gpu_index}: count MIG devices")
        for k in range(n):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, k)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) in (nv.NVML_ERROR_NOT_FOUND,
                                                   nv.NVML_ERROR_INVALID_ARGUMENT):
                    continue
                raise s.translate(exc, f"GPU {gpu_index}: open MIG device {k}") from exc
            gi = s.call(nv.nvmlDeviceGetGpuInstanceId, mig,
                        what=f"GPU {gpu_index}: GI of MIG device {k}")
            ci = s.call(nv.nvmlDeviceGetComputeInstanceId, mig,
                        what=f"GPU {gpu_index}: CI of MIG device {k}")
            uuid = text(s.call(nv.nvmlDeviceGetUUID, mig,
                               what=f"GPU {gpu_index}: UUID of MIG device {k}"))
            out[int(gi)] = (mig, uuid, int(ci))
        return out

    def device_uuids(self, gpu_index: int) -> dict[int, str]:
        h = self.session.handle(gpu_index)
        return {gi: v[1] for gi, v in self.mig_devices(h, gpu_index).items()}

    def instances(self, gpu_index: int) -> list[MigInstance]:
        s = self.session
        nv = s.nv
        h = s.handle(gpu_index)
        s.require_mig(h, gpu_index, "list GPU instances")
        cat = self.catalog(gpu_index)
        devices = self.mig_devices(h, gpu_index)
        out = []
        for prof in cat.profiles:
            arr = (nv.c_nvmlGpuInstance_t * max(prof.max_instances, 1))()
            count = ctypes.c_uint(0)
            s.call(nv.nvmlDeviceGetGpuInstances, h, prof.profile_id, arr, ctypes.byref(count),
                   what=f"GPU {gpu_index}: list {prof.name} instances")
            for k in range(count.value):
                info = s.call(nv.nvmlGpuInstanceGetInfo, arr[k],
                              what=f"GPU {gpu_index}: read a {prof.name} instance")
                gi_id = int(info.id)
                mig = devices.get(gi_id)
                busy = bool(mig and s.processes(
                    mig[0], f"GPU {gpu_index}: processes on GI {gi_id}"))
                out.append(MigInstance(
                    gpu_index=gpu_index, gi_id=gi_id, profile=prof.name,
                    start=int(info.placement.start), size=int(info.placement.size),
                    ci_id=mig[2] if mig else None, uuid=mig[1] if mig else None,
                    memory_mib=prof.memory_mib, busy=busy,
                ))
        return sorted(out, key=lambda i: i.gi_id)

    def _ci_profile_index(self, compute_slices: int) -> int:
        table = {1: "1_SLICE", 2: "2_SLICE", 3: "3_SLICE", 4: "4_SLICE", 6: "6_SLICE",
                 7: "7_SLICE", 8: "8_SLICE"}
        return getattr(self.session.nv, f"NVML_COMPUTE_INSTANCE_PROFILE_{table[compute_slices]}")

    def create(self, gpu_index: int, profile: str, start: int,
               owner: str | None = None) -> MigInstance:
        s = self.session
        nv = s.nv
        h = s.handle(gpu_index)
        where = f"GPU {gpu_index}: create {profile}@{start}"
        s.require_mig(h, gpu_index, f"create {profile}@{start}")
        prof = self.catalog(gpu_index).profile(profile)
        if start not in prof.placement_starts:
            raise InvalidPlacementError(
                f"{where}: {profile} cannot start at memory slice {start}; valid starts are "
                f"{{{','.join(map(str, prof.placement_starts))}}}")
        placement = nv.c_nvmlGpuInstancePlacement_t()
        placement.start = start
        placement.size = prof.memory_slices  # memory slices, not info.sliceCount
        gi = s.call(nv.nvmlDeviceCreateGpuInstanceWithPlacement, h, prof.profile_id,
                    ctypes.byref(placement), what=where)
        try:
            ci_info = s.call(
                nv.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi,
                self._ci_profile_index(prof.compute_slices),
                nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                what=f"{where}: read the full-size compute instance profile")
            ci = s.call(nv.nvmlGpuInstanceCreateComputeInstance, gi, ci_info.id,
                        what=f"{where}: create its compute instance")
        except MigError:
            try:
                nv.nvmlGpuInstanceDestroy(gi)  # roll back the half-made instance
            except nv.NVMLError as exc:
                log.error("%s: could not roll back the GPU instance: %s", where, exc)
            raise
        gi_id = int(s.call(nv.nvmlGpuInstanceGetInfo, gi, what=where).id)
        ci_id = int(s.call(nv.nvmlComputeInstanceGetInfo, ci, what=where).id)
        uuid = self.mig_devices(h, gpu_index).get(gi_id, (None, None, None))[1]
        log.info("%s: GI %s CI %s %s", where, gi_id, ci_id, uuid)
        return MigInstance(gpu_index, gi_id, profile, start, prof.memory_slices, ci_id, uuid,
                           prof.memory_mib, False, owner)

    def destroy(self, gpu_index: int, gi_id: int) -> None:
        s = self.session
        nv = s.nv
        h = s.handle(gpu_index)
        where = f"GPU {gpu_index}: destroy GPU instance {gi_id}"
        s.require_mig(h, gpu_index, f"destroy GPU instance {gi_id}")
        gi = s.call(nv.nvmlDeviceGetGpuInstanceById, h, gi_id, what=where)
        for slices in CI_SLICES:
            try:
                ci_info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi, self._ci_profile_index(slices),
                    nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            except nv.NVMLError:
                continue  # profile not available in this GI
            arr = (nv.c_nvmlComputeInstance_t * 8)()
            count = ctypes.c_uint(0)
            s.call(nv.nvmlGpuInstanceGetComputeInstances, gi, ci_info.id, arr,
                   ctypes.byref(count), what=f"{where}: list compute instances")
            for k in range(count.value):
                s.call(nv.nvmlComputeInstanceDestroy, arr[k],
                       what=f"{where}: destroy its compute instance")
        s.call(nv.nvmlGpuInstanceDestroy, gi, what=where)
        log.info("%s: done", where)
