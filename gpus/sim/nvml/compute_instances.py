"""The C functions of compute instances inside a GPU instance: profiles, create (a MIG
device slot and a ``MIG-`` UUID each), destroy (refused while processes run), list, look
up by id, info."""
from __future__ import annotations

import uuid as uuidlib
from ctypes import POINTER, c_void_p, cast

from .calls import NvmlCalls
from .model import FakeComputeInstance, FakeGpuInstance
from .nvml_h import (CI_PROFILE_INFO_V2, COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, ERROR_IN_USE,
                     ERROR_INSUFFICIENT_RESOURCES, ERROR_INVALID_ARGUMENT,
                     ERROR_NO_PERMISSION, ERROR_NOT_FOUND, ERROR_NOT_SUPPORTED,
                     ComputeInstanceInfo, ComputeInstanceProfileInfoV2)
from .privileges import PrivilegeRules


class ComputeInstanceCalls(NvmlCalls, PrivilegeRules):
    """nvmlGpuInstance*ComputeInstance* and nvmlComputeInstanceDestroy/GetInfo_v2."""

    def _ci_profile_v2(self, gpu_instance, profile: int, eng_profile: int, info) -> int:
        gi: FakeGpuInstance = self._lookup(gpu_instance, (FakeGpuInstance,), "gpuInstance")
        self._need(info, "info")
        out = self._out(info, ComputeInstanceProfileInfoV2)
        if out.version != CI_PROFILE_INFO_V2:
            raise self._violation(f"info->version {out.version:#x}, expected "
                                  f"nvmlComputeInstanceProfileInfo_v2 {CI_PROFILE_INFO_V2:#x}")
        if eng_profile != COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED or profile > 0x8:
            return ERROR_INVALID_ARGUMENT
        found = gi.ci_profile(profile)
        if found is None:
            return ERROR_NOT_SUPPORTED
        slices, count = found
        out.id = profile  # real drivers report CI profile ids equal to the index
        out.sliceCount = slices
        out.instanceCount = count
        out.multiprocessorCount = gi.profile.sm_count * slices // gi.profile.compute_slices
        out.sharedCopyEngineCount = out.sharedDecoderCount = 1
        gi_name = gi.profile.name
        out.name = (f"MIG {gi_name}" if slices == gi.profile.compute_slices
                    else f"MIG {slices}c.{gi_name}").encode()

    def _create_ci(self, gpu_instance, profile_id: int, compute_instance) -> int:
        gi: FakeGpuInstance = self._lookup(gpu_instance, (FakeGpuInstance,), "gpuInstance")
        self._need(compute_instance, "computeInstance")
        if not self._may_configure():
            return ERROR_NO_PERMISSION
        found = gi.ci_profile(profile_id)
        if found is None:
            return ERROR_NOT_SUPPORTED if profile_id < 0x9 else ERROR_INVALID_ARGUMENT
        slices, count = found
        used = sum(ci.slices for ci in gi.cis.values())
        same = sum(1 for ci in gi.cis.values() if ci.profile_index == profile_id)
        if used + slices > gi.profile.compute_slices or same >= count:
            return ERROR_INSUFFICIENT_RESOURCES
        gpu = gi.gpu
        slot = next(i for i in range(gpu.catalog.compute_slices) if i not in gpu.mig_slots)
        ci_id = next(i for i in range(8) if i not in gi.cis)
        gpu.generation += 1
        uid = uuidlib.uuid5(uuidlib.NAMESPACE_OID,
                            f"{gpu.uuid}/{gi.id}/{ci_id}/{gpu.generation}")
        ci = FakeComputeInstance(gi, ci_id, profile_id, slices, used, slot, f"MIG-{uid}")
        gi.cis[ci_id] = ci
        gpu.mig_slots[slot] = ci
        self._set_handle(compute_instance, ci)

    def _destroy_ci(self, compute_instance) -> int:
        ci: FakeComputeInstance = self._lookup(compute_instance, (FakeComputeInstance,),
                                               "computeInstance")
        if not self._may_configure():
            return ERROR_NO_PERMISSION
        if ci.processes:
            return ERROR_IN_USE  # "processes (e.g. CUDA application) are active"
        del ci.gi.cis[ci.id]
        del ci.gi.gpu.mig_slots[ci.slot]

    def _get_cis(self, gpu_instance, profile_id: int, compute_instances, count) -> int:
        gi: FakeGpuInstance = self._lookup(gpu_instance, (FakeGpuInstance,), "gpuInstance")
        self._need(count, "count")
        self._need(compute_instances, "computeInstances")
        found = gi.ci_profile(profile_id)
        if found is None:
            return ERROR_NOT_SUPPORTED
        cap = self._capacity(2)
        if cap is not None and cap < found[1]:
            raise self._violation(f"computeInstances buffer holds {cap}, profile "
                                  f"{profile_id} supports {found[1]}")
        cis = sorted((c for c in gi.cis.values() if c.profile_index == profile_id),
                     key=lambda c: c.id)
        for k, c in enumerate(cis):
            cast(compute_instances, POINTER(c_void_p))[k] = c.addr
        count[0] = len(cis)

    def _ci_by_id(self, gpu_instance, ci_id: int, compute_instance) -> int:
        gi: FakeGpuInstance = self._lookup(gpu_instance, (FakeGpuInstance,), "gpuInstance")
        self._need(compute_instance, "computeInstance")
        ci = gi.cis.get(ci_id)
        if ci is None:
            return ERROR_NOT_FOUND
        self._set_handle(compute_instance, ci)

    def _ci_info(self, compute_instance, info) -> int:
        ci: FakeComputeInstance = self._lookup(compute_instance, (FakeComputeInstance,),
                                               "computeInstance")
        self._need(info, "info")
        out = self._out(info, ComputeInstanceInfo)
        out.device = ci.gi.gpu.addr
        out.gpuInstance = ci.gi.addr
        out.id = ci.id
        out.profileId = ci.profile_index
        out.placement.start, out.placement.size = ci.start, ci.slices
