"""The MIG catalogue of a GPU as NVML reports it: its profiles and their possible placements.

``nvmlDeviceGetGpuInstanceProfileInfo`` takes the profile *index*
(``NVML_GPU_INSTANCE_PROFILE_*``) and returns the profile *id* that create/list calls take;
a profile's size comes from its possible placements, in **memory slices** (not its
``sliceCount``, which counts compute slices). Differences from the static table are logged.
"""
from __future__ import annotations

import ctypes
import logging

from mig.catalog import Catalog, Profile, diff_catalogs, load_catalog
from mig.errors import MigDisabledError, UnknownGpuModelError
from gpus.nvml.session import NvmlSession, text

log = logging.getLogger(__name__)


def static_catalog(name: str) -> Catalog | None:
    """The static table of a GPU by the name NVML reports (None for a model it lacks)."""
    try:
        return load_catalog(name)
    except UnknownGpuModelError:
        return None


class NvmlCatalogReader:
    """Reads a GPU's MIG profiles from NVML (in MIG mode only)."""

    def __init__(self, session: NvmlSession):
        self.session = session

    def read(self, gpu_index: int) -> Catalog:
        """The catalogue as NVML reports it (profile info and possible placements)."""
        s = self.session
        h = s.handle(gpu_index)
        s.require_mig(h, gpu_index, "read the MIG profiles")
        name = text(s.call(s.nv.nvmlDeviceGetName, h, what=f"GPU {gpu_index}: read its name"))
        static = static_catalog(name)
        profiles = self._profiles(h, gpu_index)
        if not profiles:
            raise MigDisabledError(f"GPU {gpu_index} ({name}) reports no MIG profiles")
        if static is not None:  # the table's order (NVML's is by profile index)
            order = {p.profile_id: k for k, p in enumerate(static.profiles)}
            profiles.sort(key=lambda p: (order.get(p.profile_id, len(order)),
                                         p.nvml_profile_index))
        mem_slices = max(max(p.placement_starts) + p.memory_slices for p in profiles)
        # whole-GPU memory and SMs are not part of the MIG profile info: the largest
        # profile has less (e.g. 7g.80gb 81152 MiB of 81559)
        memory_mib = s.memory_mib(h, gpu_index, static)
        cat = Catalog(
            model=static.model if static else name,
            memory_slices=mem_slices,
            compute_slices=max(p.compute_slices for p in profiles),
            memory_mib=memory_mib or max(p.memory_mib for p in profiles),
            sm_count=static.sm_count if static else max(p.sm_count for p in profiles),
            profiles=tuple(profiles),
            media_extension_instances=static.media_extension_instances if static else 1,
            aliases=static.aliases if static else (name,),
            source=f"NVML on GPU {gpu_index} ({name})",
        )
        if static is not None:
            for line in diff_catalogs(static, cat):
                log.warning("GPU %s (%s): driver differs from the static table: %s",
                            gpu_index, name, line)
        else:
            log.warning("GPU %s: no static MIG table for %r; using what NVML reports", gpu_index,
                        name)
        return cat

    def _profiles(self, handle, gpu_index: int) -> list[Profile]:
        """Every GPU instance profile the GPU has, with its possible placements."""
        nv = self.session.nv
        profiles = []
        for index in range(nv.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) in (nv.NVML_ERROR_NOT_SUPPORTED,
                                                   nv.NVML_ERROR_INVALID_ARGUMENT):
                    continue  # this profile index does not exist on this GPU
                raise self.session.translate(exc, f"GPU {gpu_index}: read profile index {index}") from exc
            places = self._possible_placements(handle, gpu_index, info)
            if not places:
                continue
            pname = text(getattr(info, "name", b"")).replace("MIG ", "").strip()
            if not pname:
                pname = f"{info.sliceCount}g.{round(info.memorySizeMB / 1024)}gb"
            profiles.append(Profile(
                name=pname, nvml_profile_index=index, profile_id=int(info.id),
                memory_mib=int(info.memorySizeMB), sm_count=int(info.multiprocessorCount),
                compute_slices=int(info.sliceCount), memory_slices=int(places[0][1]),
                max_instances=int(info.instanceCount),
                media_extensions="+me" in pname,
                placement_starts=tuple(sorted(s for s, _ in places)),
            ))
        return profiles

    def _possible_placements(self, handle, gpu_index: int, info) -> list[tuple[int, int]]:
        nv = self.session.nv
        n = max(int(info.instanceCount), 8)
        arr = (nv.c_nvmlGpuInstancePlacement_t * n)()
        count = ctypes.c_uint(n)
        self.session.call(nv.nvmlDeviceGetGpuInstancePossiblePlacements, handle, info.id, arr,
                          ctypes.byref(count),
                          what=f"GPU {gpu_index}: read placements of profile id {info.id}")
        return [(int(arr[k].start), int(arr[k].size)) for k in range(count.value)]
