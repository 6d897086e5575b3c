"""The NVML backend: MIG on real GPUs through ``pynvml`` (package ``nvidia-ml-py``).

The only module of :mod:`mig` that touches NVML; ``pynvml`` is imported when the backend
is created. Notes that matter on hardware:

- a GPU instance is created at a placement whose ``size`` is in **memory slices** (from the
  possible placements), not the profile's ``sliceCount`` (compute slices);
- ``nvmlDeviceGetGpuInstanceProfileInfo`` takes the profile *index*
  (``NVML_GPU_INSTANCE_PROFILE_*``); create/list calls take the profile *id* it returns;
- each GPU instance gets one full-size compute instance (shared engines); destroy removes
  the compute instances first, then the GPU instance;
- NVML errors become :mod:`mig.errors` classes (IN_USE, INSUFFICIENT_RESOURCES,
  NO_PERMISSION, MIG disabled/NOT_SUPPORTED, NOT_FOUND), each naming GPU, profile and
  placement, and what to do;
- ``nvmlDeviceSetMigMode`` succeeds when the mode is set; whether it was activated comes
  back in its activation status (IN_USE while the GPU is busy), which is checked;
- utilisation counters: per-process samples on a whole GPU (or MPS) come from
  ``nvmlDeviceGetProcessUtilization`` (NOT_SUPPORTED in MIG mode); activity per MIG
  instance exists only in DCGM's profiling fields (``DCGM_FI_PROF_GR_ENGINE_ACTIVE``), which
  this backend does not read: :meth:`NvmlBackend.instance_activity` raises
  :class:`CountersUnavailableError` saying so, and the agent degrades to what jobs report;
- reading needs no root, but the whole-GPU memory of a MIG-enabled GPU is only reported to
  privileged callers; without it the static table's value is used.

Tested end to end through the real pynvml against a fake libnvidia-ml
(tests/unit/mig/fake_libnvml.py).
"""
from __future__ import annotations

import ctypes
import logging
from typing import Any, Callable

from mig.backend import GpuInfo, InstanceActivity, MigInstance, ProcessMemory, ProcessUtilization
from mig.catalog import Catalog, Profile, diff_catalogs, load_catalog
from mig.errors import (
    BackendUnavailableError,
    CountersUnavailableError,
    InUseError,
    InvalidPlacementError,
    MigDisabledError,
    MigError,
    NoPermissionError,
    NotFoundError,
    PlacementOccupiedError,
    UnknownGpuModelError,
)

log = logging.getLogger(__name__)

MIB = 1024 * 1024


def _import_pynvml():
    try:
        import pynvml  # noqa: PLC0415 - only this backend needs it
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise BackendUnavailableError(
            "pynvml is not installed; `pip install nvidia-ml-py` or use the simulated backend"
        ) from exc
    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlBackend:
    """MIG management of this node's GPUs through NVML."""

    owners_are_pids = True  # NVML names a process by its pid (the agent maps pids to jobs)

    def __init__(self, nvml: Any | None = None):
        self.nv = nvml if nvml is not None else _import_pynvml()
        self._catalogs: dict[int, Catalog] = {}
        self._call(self.nv.nvmlInit, what="initialise NVML")

    def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except self.nv.NVMLError:  # pragma: no cover
            pass

    # -- errors ---------------------------------------------------------------------------
    def _translate(self, exc: Exception, what: str) -> MigError:
        nv = self.nv
        code = getattr(exc, "value", None)
        msg = f"{what}: NVML says {exc}"
        if code == nv.NVML_ERROR_IN_USE:
            return InUseError(f"{msg}; a process or a compute instance still uses it, wait for "
                              f"the job to end or stop it first")
        if code == nv.NVML_ERROR_INSUFFICIENT_RESOURCES:
            # the class the simulated backend raises for the same refusal (an
            # InsufficientResourcesError that is also an InvalidPlacementError)
            return PlacementOccupiedError(
                f"{msg}; the placement overlaps an existing instance or the profile has no "
                f"instance left, free one or choose another placement")
        if code == nv.NVML_ERROR_NO_PERMISSION:
            return NoPermissionError(f"{msg}; MIG configuration needs root (run the node agent "
                                     f"as root)")
        if code == nv.NVML_ERROR_NOT_SUPPORTED:
            return MigDisabledError(f"{msg}; MIG mode is off or this GPU does not support MIG "
                                    f"(enable it with `nvidia-smi -i N -mig 1`)")
        if code == nv.NVML_ERROR_NOT_FOUND:
            return NotFoundError(f"{msg}; it does not exist (any more), list the instances again")
        if code == nv.NVML_ERROR_INVALID_ARGUMENT:
            return InvalidPlacementError(f"{msg}; check the profile and placement against "
                                         f"`gpupack mig catalog`")
        if code in (nv.NVML_ERROR_DRIVER_NOT_LOADED, nv.NVML_ERROR_LIBRARY_NOT_FOUND,
                    nv.NVML_ERROR_UNINITIALIZED):
            return BackendUnavailableError(f"{msg}; is the NVIDIA driver loaded on this node? "
                                           f"Use the simulated backend where there is no GPU")
        return MigError(msg)

    def _call(self, fn: Callable, *args: Any, what: str) -> Any:
        try:
            return fn(*args)
        except self.nv.NVMLError as exc:
            raise self._translate(exc, what) from exc

    # -- devices --------------------------------------------------------------------------
    def _handle(self, gpu_index: int):
        return self._call(self.nv.nvmlDeviceGetHandleByIndex, gpu_index,
                          what=f"GPU {gpu_index}: open the device")

    def list_gpus(self) -> list[GpuInfo]:
        nv = self.nv
        out = []
        for i in range(self._call(nv.nvmlDeviceGetCount, what="count GPUs")):
            h = self._handle(i)
            name = _text(self._call(nv.nvmlDeviceGetName, h, what=f"GPU {i}: read its name"))
            uuid = _text(self._call(nv.nvmlDeviceGetUUID, h, what=f"GPU {i}: read its UUID"))
            try:
                static: Catalog | None = load_catalog(name)
            except UnknownGpuModelError:
                static = None
            model = static.model if static else name
            mem = self._memory_mib(h, i, static)
            out.append(GpuInfo(i, uuid, model, name, mem or 0, self._mig_on(h, i)))
        return out

    def _memory_mib(self, handle, gpu_index: int, static: Catalog | None) -> int | None:
        """Total memory of the whole GPU in MiB.

        nvml.h: in MIG mode, nvmlDeviceGetMemoryInfo on the parent device returns the
        aggregate only to a privileged caller; a non-root reader falls back to the static
        table (None without one).
        """
        nv = self.nv
        try:
            return int(nv.nvmlDeviceGetMemoryInfo(handle).total // MIB)
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) not in (nv.NVML_ERROR_NO_PERMISSION,
                                                   nv.NVML_ERROR_NOT_SUPPORTED):
                raise self._translate(exc, f"GPU {gpu_index}: read its memory") from exc
            log.debug("GPU %s: total memory not readable (%s); using the static table",
                      gpu_index, exc)
            return static.memory_mib if static else None

    def _mig_on(self, handle, gpu_index: int) -> bool:
        nv = self.nv
        try:
            current, _pending = nv.nvmlDeviceGetMigMode(handle)
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) == nv.NVML_ERROR_NOT_SUPPORTED:
                return False  # not a MIG-capable GPU
            raise self._translate(exc, f"GPU {gpu_index}: read MIG mode") from exc
        return current == nv.NVML_DEVICE_MIG_ENABLE

    def mig_mode(self, gpu_index: int) -> bool:
        return self._mig_on(self._handle(gpu_index), gpu_index)

    def set_mig_mode(self, gpu_index: int, enabled: bool) -> None:
        nv = self.nv
        h = self._handle(gpu_index)
        mode = nv.NVML_DEVICE_MIG_ENABLE if enabled else nv.NVML_DEVICE_MIG_DISABLE
        what = f"GPU {gpu_index}: switch MIG mode {'on' if enabled else 'off'}"
        self._catalogs.pop(gpu_index, None)
        # the call succeeds when the mode is *set*; whether it was *activated* comes back in
        # activationStatus (nvml.h: IN_USE when the GPU is not idle, RESET_REQUIRED where
        # a reset is not possible from here)
        status = self._call(nv.nvmlDeviceSetMigMode, h, mode, what=what)
        if isinstance(status, int) and status not in (nv.NVML_SUCCESS,
                                                      nv.NVML_ERROR_RESET_REQUIRED):
            raise self._translate(nv.NVMLError(status),
                                  f"{what}: the change is pending, not activated")
        current, pending = self._call(nv.nvmlDeviceGetMigMode, h,
                                      what=f"GPU {gpu_index}: read MIG mode")
        if current != pending:
            log.warning("GPU %s: MIG mode change is pending; it takes effect after a GPU reset "
                        "(`nvidia-smi -i %s -r` with no process on the GPU)", gpu_index, gpu_index)

    def _require_mig(self, handle, gpu_index: int, what: str) -> None:
        if not self._mig_on(handle, gpu_index):
            raise MigDisabledError(
                f"GPU {gpu_index}: cannot {what}: MIG mode is off; enable it with "
                f"`nvidia-smi -i {gpu_index} -mig 1` as root (may need a GPU reset)")

    # -- catalogue ------------------------------------------------------------------------
    def read_catalog(self, gpu_index: int) -> Catalog:
        """The catalogue as NVML reports it (profile info and possible placements)."""
        nv = self.nv
        h = self._handle(gpu_index)
        self._require_mig(h, gpu_index, "read the MIG profiles")
        name = _text(self._call(nv.nvmlDeviceGetName, h, what=f"GPU {gpu_index}: read its name"))
        try:
            static: Catalog | None = load_catalog(name)
        except UnknownGpuModelError:
            static = None
        profiles = []
        for index in range(nv.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = nv.nvmlDeviceGetGpuInstanceProfileInfo(h, index)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) in (nv.NVML_ERROR_NOT_SUPPORTED,
                                                   nv.NVML_ERROR_INVALID_ARGUMENT):
                    continue  # this profile index does not exist on this GPU
                raise self._translate(exc, f"GPU {gpu_index}: read profile index {index}") from exc
            places = self._possible_placements(h, gpu_index, info)
            if not places:
                continue
            pname = _text(getattr(info, "name", b"")).replace("MIG ", "").strip()
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
        if not profiles:
            raise MigDisabledError(f"GPU {gpu_index} ({name}) reports no MIG profiles")
        if static is not None:  # the table's order (NVML's is by profile index)
            order = {p.profile_id: k for k, p in enumerate(static.profiles)}
            profiles.sort(key=lambda p: (order.get(p.profile_id, len(order)),
                                         p.nvml_profile_index))
        mem_slices = max(max(p.placement_starts) + p.memory_slices for p in profiles)
        # whole-GPU memory and SMs are not part of the MIG profile info: the largest
        # profile has less (e.g. 7g.80gb 81152 MiB of 81559)
        memory_mib = self._memory_mib(h, gpu_index, static)
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

    def _possible_placements(self, handle, gpu_index: int, info) -> list[tuple[int, int]]:
        nv = self.nv
        n = max(int(info.instanceCount), 8)
        arr = (nv.c_nvmlGpuInstancePlacement_t * n)()
        count = ctypes.c_uint(n)
        self._call(nv.nvmlDeviceGetGpuInstancePossiblePlacements, handle, info.id, arr,
                   ctypes.byref(count),
                   what=f"GPU {gpu_index}: read placements of profile id {info.id}")
        return [(int(arr[k].start), int(arr[k].size)) for k in range(count.value)]

    def catalog(self, gpu_index: int) -> Catalog:
        if gpu_index not in self._catalogs:
            self._catalogs[gpu_index] = self.read_catalog(gpu_index)
        return self._catalogs[gpu_index]

    # -- instances ------------------------------------------------------------------------
    def _mig_devices(self, handle, gpu_index: int) -> dict[int, tuple[Any, str, int]]:
        """{GI id: (MIG device handle, MIG-uuid, CI id)}."""
        nv = self.nv
        out = {}
        n = self._call(nv.nvmlDeviceGetMaxMigDeviceCount, handle,
                       what=f"GPU {gpu_index}: count MIG devices")
        for k in range(n):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, k)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) in (nv.NVML_ERROR_NOT_FOUND,
                                                   nv.NVML_ERROR_INVALID_ARGUMENT):
                    continue
                raise self._translate(exc, f"GPU {gpu_index}: open MIG device {k}") from exc
            gi = self._call(nv.nvmlDeviceGetGpuInstanceId, mig,
                            what=f"GPU {gpu_index}: GI of MIG device {k}")
            ci = self._call(nv.nvmlDeviceGetComputeInstanceId, mig,
                            what=f"GPU {gpu_index}: CI of MIG device {k}")
            uuid = _text(self._call(nv.nvmlDeviceGetUUID, mig,
                                    what=f"GPU {gpu_index}: UUID of MIG device {k}"))
            out[int(gi)] = (mig, uuid, int(ci))
        return out

    def _processes(self, handle, what: str) -> list:
        return list(self._call(self.nv.nvmlDeviceGetComputeRunningProcesses, handle, what=what)
                    or [])

    def list_instances(self, gpu_index: int) -> list[MigInstance]:
        nv = self.nv
        h = self._handle(gpu_index)
        self._require_mig(h, gpu_index, "list GPU instances")
        cat = self.catalog(gpu_index)
        devices = self._mig_devices(h, gpu_index)
        out = []
        for prof in cat.profiles:
            arr = (nv.c_nvmlGpuInstance_t * max(prof.max_instances, 1))()
            count = ctypes.c_uint(0)
            self._call(nv.nvmlDeviceGetGpuInstances, h, prof.profile_id, arr, ctypes.byref(count),
                       what=f"GPU {gpu_index}: list {prof.name} instances")
            for k in range(count.value):
                info = self._call(nv.nvmlGpuInstanceGetInfo, arr[k],
                                  what=f"GPU {gpu_index}: read a {prof.name} instance")
                gi_id = int(info.id)
                mig = devices.get(gi_id)
                busy = bool(mig and self._processes(
                    mig[0], f"GPU {gpu_index}: processes on GI {gi_id}"))
                out.append(MigInstance(
                    gpu_index=gpu_index, gi_id=gi_id, profile=prof.name,
                    start=int(info.placement.start), size=int(info.placement.size),
                    ci_id=mig[2] if mig else None, uuid=mig[1] if mig else None,
                    memory_mib=prof.memory_mib, busy=busy,
                ))
        return sorted(out, key=lambda i: i.gi_id)

    def _ci_profile_index(self, compute_slices: int) -> int:
        nv = self.nv
        table = {1: "1_SLICE", 2: "2_SLICE", 3: "3_SLICE", 4: "4_SLICE", 6: "6_SLICE",
                 7: "7_SLICE", 8: "8_SLICE"}
        return getattr(nv, f"NVML_COMPUTE_INSTANCE_PROFILE_{table[compute_slices]}")

    def create_instance(self, gpu_index: int, profile: str, start: int,
                        owner: str | None = None) -> MigInstance:
        nv = self.nv
        h = self._handle(gpu_index)
        where = f"GPU {gpu_index}: create {profile}@{start}"
        self._require_mig(h, gpu_index, f"create {profile}@{start}")
        prof = self.catalog(gpu_index).profile(profile)
        if start not in prof.placement_starts:
            raise InvalidPlacementError(
                f"{where}: {profile} cannot start at memory slice {start}; valid starts are "
                f"{{{','.join(map(str, prof.placement_starts))}}}")
        placement = nv.c_nvmlGpuInstancePlacement_t()
        placement.start = start
        placement.size = prof.memory_slices  # memory slices, not info.sliceCount
        gi = self._call(nv.nvmlDeviceCreateGpuInstanceWithPlacement, h, prof.profile_id,
                        ctypes.byref(placement), what=where)
        try:
            ci_info = self._call(
                nv.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi,
                self._ci_profile_index(prof.compute_slices),
                nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                what=f"{where}: read the full-size compute instance profile")
            ci = self._call(nv.nvmlGpuInstanceCreateComputeInstance, gi, ci_info.id,
                            what=f"{where}: create its compute instance")
        except MigError:
            try:
                nv.nvmlGpuInstanceDestroy(gi)  # roll back the half-made instance
            except nv.NVMLError as exc:
                log.error("%s: could not roll back the GPU instance: %s", where, exc)
            raise
        gi_id = int(self._call(nv.nvmlGpuInstanceGetInfo, gi, what=where).id)
        ci_id = int(self._call(nv.nvmlComputeInstanceGetInfo, ci, what=where).id)
        uuid = self._mig_devices(h, gpu_index).get(gi_id, (None, None, None))[1]
        log.info("%s: GI %s CI %s %s", where, gi_id, ci_id, uuid)
        return MigInstance(gpu_index, gi_id, profile, start, prof.memory_slices, ci_id, uuid,
                           prof.memory_mib, False, owner)

    def destroy_instance(self, gpu_index: int, gi_id: int) -> None:
        nv = self.nv
        h = self._handle(gpu_index)
        where = f"GPU {gpu_index}: destroy GPU instance {gi_id}"
        self._require_mig(h, gpu_index, f"destroy GPU instance {gi_id}")
        gi = self._call(nv.nvmlDeviceGetGpuInstanceById, h, gi_id, what=where)
        for slices in (1, 2, 3, 4, 6, 7, 8):
            try:
                ci_info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi, self._ci_profile_index(slices),
                    nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            except nv.NVMLError:
                continue  # profile not available in this GI
            arr = (nv.c_nvmlComputeInstance_t * 8)()
            count = ctypes.c_uint(0)
            self._call(nv.nvmlGpuInstanceGetComputeInstances, gi, ci_info.id, arr,
                       ctypes.byref(count), what=f"{where}: list compute instances")
            for k in range(count.value):
                self._call(nv.nvmlComputeInstanceDestroy, arr[k],
                           what=f"{where}: destroy its compute instance")
        self._call(nv.nvmlGpuInstanceDestroy, gi, what=where)
        log.info("%s: done", where)

    def device_uuids(self, gpu_index: int) -> dict[int, str]:
        h = self._handle(gpu_index)
        return {gi: v[1] for gi, v in self._mig_devices(h, gpu_index).items()}

    def process_memory(self, gpu_index: int, gi_id: int | None = None) -> list[ProcessMemory]:
        """Memory per process on the whole GPU, or on one MIG device (by GI id)."""
        nv = self.nv
        h = self._handle(gpu_index)
        targets: list[tuple[Any, str]]
        if self._mig_on(h, gpu_index):
            devices = self._mig_devices(h, gpu_index)
            if gi_id is None:
                targets = [(m, u) for m, u, _ in devices.values()]
            elif gi_id in devices:
                targets = [devices[gi_id][:2]]
            else:
                raise NotFoundError(f"GPU {gpu_index}: no MIG device for GPU instance {gi_id}")
        else:
            uuid = _text(self._call(nv.nvmlDeviceGetUUID, h, what=f"GPU {gpu_index}: UUID"))
            targets = [(h, uuid)]
        out = []
        for handle, uuid in targets:
            for p in self._processes(handle, f"GPU {gpu_index}: processes on {uuid}"):
                used = getattr(p, "usedGpuMemory", None)
                out.append(ProcessMemory(uuid, str(p.pid), int(used or 0)))
        return out

    # -- utilisation counters -------------------------------------------------------------
    def process_utilization(self, gpu_index: int, since_us: int = 0) -> list[ProcessUtilization]:
        """Per-process SM/memory utilisation samples newer than ``since_us`` on a whole GPU."""
        nv = self.nv
        h = self._handle(gpu_index)
        where = f"GPU {gpu_index}: read per-process utilisation"
        if self._mig_on(h, gpu_index):
            raise CountersUnavailableError(
                f"{where}: the GPU is in MIG mode, where NVML gives no per-process utilisation; "
                f"activity per MIG instance needs DCGM (DCGM_FI_PROF_GR_ENGINE_ACTIVE)")
        uuid = _text(self._call(nv.nvmlDeviceGetUUID, h, what=f"GPU {gpu_index}: UUID"))
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(h, int(since_us))
        except nv.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in (nv.NVML_ERROR_NOT_FOUND, nv.NVML_SUCCESS):
                return []  # no sample newer than since_us
            if code == nv.NVML_ERROR_NOT_SUPPORTED:
                raise CountersUnavailableError(
                    f"{where}: NVML says {exc}; this GPU or driver keeps no per-process "
                    f"utilisation samples, so only jobs that report their progress are watched") from exc
            raise self._translate(exc, where) from exc
        return [ProcessUtilization(uuid, str(int(s.pid)), int(s.timeStamp), int(s.smUtil), int(s.memUtil))
                for s in samples]

    def instance_activity(self, gpu_index: int) -> list[InstanceActivity]:
        """Not available through NVML: activity per MIG GPU instance is a DCGM profiling field."""
        raise CountersUnavailableError(
            f"GPU {gpu_index}: activity per MIG instance is only available through DCGM's "
            f"profiling field DCGM_FI_PROF_GR_ENGINE_ACTIVE (per GPU instance), which the NVML "
            f"backend does not read; contention on MIG slices is seen only for jobs that report "
            f"their progress (`gpupack report`)")
