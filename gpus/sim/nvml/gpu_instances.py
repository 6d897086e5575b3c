"""The C functions of GPU instances: profiles, possible placements, create (with the
placement and resource checks), destroy, list, look up by id, info."""
from __future__ import annotations

from ctypes import POINTER, c_void_p, cast

from mig.catalog import Profile

from .calls import NvmlCalls
from .model import FakeGpu, FakeGpuInstance
from .nvml_h import (ERROR_IN_USE, ERROR_INSUFFICIENT_RESOURCES, ERROR_INVALID_ARGUMENT,
                     ERROR_NO_PERMISSION, ERROR_NOT_FOUND, ERROR_NOT_SUPPORTED,
                     GI_PROFILE_INFO_V2, GPU_INSTANCE_PROFILE_COUNT, SUCCESS,
                     GpuInstanceInfo, GpuInstancePlacement, GpuInstanceProfileInfo,
                     GpuInstanceProfileInfoV2)
from .privileges import PrivilegeRules


class GpuInstanceCalls(NvmlCalls, PrivilegeRules):
    """nvmlDeviceGetGpuInstance*, nvmlDeviceCreateGpuInstanceWithPlacement and
    nvmlGpuInstanceDestroy/GetInfo."""

    # -- GPU-instance profiles and placements --------------------------------------------
    def _gi_profile(self, device, index: int) -> tuple[int, Profile | None]:
        dev = self._parent(device)
        if index >= GPU_INSTANCE_PROFILE_COUNT:
            return ERROR_INVALID_ARGUMENT, None
        if not dev.mig_on:
            return ERROR_NOT_SUPPORTED, None  # "device doesn't have MIG mode enabled"
        prof = dev.profile_by_index(index)
        if prof is None:
            return ERROR_NOT_SUPPORTED, None  # "profile isn't supported"
        return SUCCESS, prof

    @staticmethod
    def _fill_gi_profile(out, prof: Profile) -> None:
        out.id = prof.profile_id
        out.isP2pSupported = 0
        out.sliceCount = prof.compute_slices
        out.instanceCount = prof.max_instances
        out.multiprocessorCount = prof.sm_count
        # engine counts are not modelled (the backend does not read them)
        out.memorySizeMB = prof.memory_mib

    def _gi_profile_v1(self, device, index: int, info) -> int:
        self._need(info, "info")
        ret, prof = self._gi_profile(device, index)
        if ret:
            return ret
        self._fill_gi_profile(self._out(info, GpuInstanceProfileInfo), prof)

    def _gi_profile_v2(self, device, index: int, info) -> int:
        self._need(info, "info")
        out = self._out(info, GpuInstanceProfileInfoV2)
        if out.version != GI_PROFILE_INFO_V2:
            raise self._violation(f"info->version {out.version:#x}, expected "
                                  f"nvmlGpuInstanceProfileInfo_v2 {GI_PROFILE_INFO_V2:#x}")
        ret, prof = self._gi_profile(device, index)
        if ret:
            return ret
        self._fill_gi_profile(out, prof)
        out.name = f"MIG {prof.name}".encode()

    def _gi_profile_by_id(self, dev: FakeGpu, profile_id: int) -> tuple[int, Profile | None]:
        if not dev.mig_on:
            return ERROR_NOT_SUPPORTED, None
        prof = dev.profile_by_id(profile_id)
        if prof is None:
            return ERROR_INVALID_ARGUMENT, None  # not a profile id of this device
        return SUCCESS, prof

    def _possible_placements(self, device, profile_id: int, placements, count) -> int:
        dev = self._parent(device)
        self._need(count, "count")
        ret, prof = self._gi_profile_by_id(dev, profile_id)
        if ret:
            return ret
        starts = prof.placement_starts
        if placements:  # NULL: only the count is asked for
            cap = self._capacity(2)
            if cap is not None and cap < len(starts):
                raise self._violation(f"placements buffer holds {cap}, profile id "
                                      f"{profile_id} has {len(starts)} placements")
            arr = cast(placements, POINTER(GpuInstancePlacement))
            for k, s in enumerate(starts):
                arr[k].start, arr[k].size = s, prof.memory_slices
        count[0] = len(starts)

    def _refusal(self, dev: FakeGpu, prof: Profile, start: int) -> int:
        """INSUFFICIENT_RESOURCES checks of a GI at a listed placement (0 if it fits)."""
        mask = ((1 << prof.memory_slices) - 1) << start
        if any(gi.mem_mask & mask for gi in dev.gis.values()):
            return ERROR_INSUFFICIENT_RESOURCES
        compute = sum(gi.profile.compute_slices for gi in dev.gis.values())
        if compute + prof.compute_slices > dev.catalog.compute_slices:
            return ERROR_INSUFFICIENT_RESOURCES
        if sum(1 for gi in dev.gis.values() if gi.profile.profile_id == prof.profile_id) \
                >= prof.max_instances:
            return ERROR_INSUFFICIENT_RESOURCES
        if prof.media_extensions and sum(
                1 for gi in dev.gis.values() if gi.profile.media_extensions
        ) >= dev.catalog.media_extension_instances:
            return ERROR_INSUFFICIENT_RESOURCES
        return SUCCESS

    # -- GPU instances -------------------------------------------------------------------
    def _create_gi(self, device, profile_id: int, placement, gpu_instance) -> int:
        dev = self._parent(device)
        self._need(gpu_instance, "gpuInstance")
        if not dev.mig_on:
            return ERROR_NOT_SUPPORTED
        if not self._may_configure():
            return ERROR_NO_PERMISSION
        prof = dev.profile_by_id(profile_id)
        if prof is None or not placement:
            return ERROR_INVALID_ARGUMENT
        pl = self._out(placement, GpuInstancePlacement)
        if pl.start not in prof.placement_starts or pl.size != prof.memory_slices:
            # a placement that nvmlDeviceGetGpuInstancePossiblePlacements_v2 does not list
            return ERROR_INVALID_ARGUMENT
        ret = self._refusal(dev, prof, pl.start)
        if ret:
            return ret
        gi = FakeGpuInstance(dev, dev.gi_id_for(pl.start, pl.size), prof, pl.start)
        dev.gis[gi.id] = gi
        self._set_handle(gpu_instance, gi)

    def _destroy_gi(self, gpu_instance) -> int:
        gi: FakeGpuInstance = self._lookup(gpu_instance, (FakeGpuInstance,), "gpuInstance")
        if not self._may_configure():
            return ERROR_NO_PERMISSION
        if gi.cis:
            # "NVML_ERROR_IN_USE ... if processes (e.g. CUDA application) or compute
            # instances are active on the GPU instance"
            return ERROR_IN_USE
        del gi.gpu.gis[gi.id]

    def _get_gis(self, device, profile_id: int, gpu_instances, count) -> int:
        dev = self._parent(device)
        self._need(count, "count")
        self._need(gpu_instances, "gpuInstances")
        ret, prof = self._gi_profile_by_id(dev, profile_id)
        if ret:
            return ret
        cap = self._capacity(2)
        if cap is not None and cap < prof.max_instances:
            # nvml.h: "the buffer must be large enough to accommodate the instances
            # supported by the profile"
            raise self._violation(f"gpuInstances buffer holds {cap}, profile id "
                                  f"{profile_id} supports {prof.max_instances} instances")
        found = sorted((gi for gi in dev.gis.values() if gi.profile.profile_id == profile_id),
                       key=lambda gi: gi.id)
        for k, gi in enumerate(found):
            cast(gpu_instances, POINTER(c_void_p))[k] = gi.addr
        count[0] = len(found)

    def _gi_by_id(self, device, gi_id: int, gpu_instance) -> int:
        dev = self._parent(device)
        self._need(gpu_instance, "gpuInstance")
        if not dev.mig_on:
            return ERROR_NOT_SUPPORTED
        gi = dev.gis.get(gi_id)
        if gi is None:
            return ERROR_NOT_FOUND
        self._set_handle(gpu_instance, gi)

    def _gi_info(self, gpu_instance, info) -> int:
        gi: FakeGpuInstance = self._lookup(gpu_instance, (FakeGpuInstance,), "gpuInstance")
        self._need(info, "info")
        out = self._out(info, GpuInstanceInfo)
        out.device = gi.gpu.addr
        out.id = gi.id
        out.profileId = gi.profile.profile_id
        out.placement.start, out.placement.size = gi.start, gi.size
