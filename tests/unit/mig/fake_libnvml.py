"""A fake ``libnvidia-ml.so.1`` for the real ``pynvml`` module (no GPU needed).

``pynvml`` loads the NVML shared library into the global ``pynvml.nvmlLib`` and looks each
C function up with ``getattr(nvmlLib, name)`` (``pynvml._nvmlGetFunctionPointer``). This
module puts a :class:`FakeNvml` library object there instead. Each exported name is a
``ctypes.CFUNCTYPE`` function pointer whose prototype follows the C declaration in
``nvml.h``, so every call made by pynvml's unmodified wrappers goes through ctypes
argument conversion exactly as a call into the real library does:

- handles are typed (``nvmlDevice_t``, ``nvmlGpuInstance_t``, ``nvmlComputeInstance_t``):
  passing a GPU-instance handle where a device handle is expected raises
  ``ctypes.ArgumentError`` in the caller;
- out-parameters are typed pointers to pynvml's structs: passing a wrong struct, a Python
  int or an unpointed value raises ``ctypes.ArgumentError``;
- the C side writes through those pointers using this module's *own* copies of the
  ``nvml.h`` struct layouts (checked against pynvml's at import), and checks the
  ``version`` field of versioned structs as NVML does;
- the caller's buffers are checked for size where NVML says "must be large enough"
  (a too-small buffer would be a memory overwrite on real hardware; here it is recorded
  in :attr:`FakeNvml.violations` and refused).

Behind the functions is a small model of one or more MIG-capable GPUs built from the
static catalogues in ``mig/data`` (the same tables the planner uses): GPU-instance
profiles (index -> id, memory/compute slices, instance counts, placements in memory
slices), GPU instances with placement checks (a placement NVML does not list ->
``NVML_ERROR_INVALID_ARGUMENT``; overlap, compute slices, instance or media-extension
limit -> ``NVML_ERROR_INSUFFICIENT_RESOURCES``), compute instances, MIG device handles
and ``MIG-`` UUIDs, processes per compute instance (destroy refused with
``NVML_ERROR_IN_USE``), MIG mode (current/pending, activation status), and the
privilege rules of the MIG user guide (create/destroy and mode changes need root or the
``mig/config`` capability -> ``NVML_ERROR_NO_PERMISSION``; aggregate memory and process
queries on a MIG-enabled parent device need privileges).

What is *not* known from the documentation and is only a plausible choice here:
GPU-instance ids (a buddy-tree numbering with the full GPU at 0), the order of MIG
device indices (a slot per compute instance, reused after destroy, so holes appear),
and the exact error code real drivers give in a few corner cases (noted inline).
"""
from __future__ import annotations

import ctypes
import traceback
import uuid as uuidlib
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_int, c_uint, c_ulonglong,
                    c_void_p, cast, sizeof)
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import pynvml

from mig.catalog import Catalog, Profile, load_catalog

from fake_nvml.nvml_h import (  # noqa: F401 (re-exported)
    CI, CI_PROFILE_INFO_V2, CI_PROFILE_SLICES, CI_SLICES_OFFERED,
    COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, DEV, ERROR_DRIVER_NOT_LOADED, ERROR_IN_USE,
    ERROR_INSUFFICIENT_RESOURCES, ERROR_INSUFFICIENT_SIZE, ERROR_INVALID_ARGUMENT,
    ERROR_NO_PERMISSION, ERROR_NOT_FOUND, ERROR_NOT_SUPPORTED, ERROR_RESET_REQUIRED,
    ERROR_STRINGS, ERROR_UNINITIALIZED, ERROR_UNKNOWN, GI, GI_PROFILE_INFO_V2,
    GPU_INSTANCE_PROFILE_COUNT, MIB, MIG_DISABLE, MIG_ENABLE, P_UINT, SUCCESS, UINT_MAX,
    ComputeInstanceInfo, ComputeInstancePlacement, ComputeInstanceProfileInfo,
    ComputeInstanceProfileInfoV2, GpuInstanceInfo, GpuInstancePlacement,
    GpuInstanceProfileInfo, GpuInstanceProfileInfoV2, Memory, ProcessInfoV2, struct_version)

from fake_nvml.model import (FakeComputeInstance, FakeGpu, FakeGpuInstance,  # noqa: F401
                             FakeMigDevice, FakeProcess, NvmlObject)


class NvmlViolation(AssertionError):
    """A call that real NVML would answer with undefined behaviour or a usage error."""


# --- the library ----------------------------------------------------------------------
class _Export:
    """One exported C function: a CFUNCTYPE pointer, called through ctypes marshalling.

    Also remembers the Python-side size of array arguments for the duration of the call,
    so the C side can check "must be large enough" buffers.
    """

    def __init__(self, fake: "FakeNvml", name: str, restype: Any, argtypes: list,
                 impl: Callable):
        self._fake, self._name, self._impl = fake, name, impl

        def thunk(*args):
            return fake._dispatch(name, impl, args)

        self._cfunc = CFUNCTYPE(restype, *argtypes)(thunk)
        self._thunk = thunk  # keep alive

    def __call__(self, *args):
        sizes = []
        for k, a in enumerate(args):
            if isinstance(a, (ctypes.Structure, ctypes.Union)):
                # the real CDLL functions have no argtypes: a struct would be passed *by
                # value* where NVML reads a pointer (our prototype would byref it silently)
                self._fake.violations.append(
                    f"{self._name}: argument {k + 1} is a {type(a).__name__} passed by "
                    f"value; pass ctypes.byref(...)")
                return ERROR_INVALID_ARGUMENT
            if isinstance(a, ctypes.Array):
                sizes.append(len(a))
            else:
                sizes.append(None)
        self._fake._arg_sizes.append(sizes)
        try:
            return self._cfunc(*args)
        finally:
            self._fake._arg_sizes.pop()

    # pynvml sets ``fn.restype = c_char_p`` on nvmlErrorString
    @property
    def restype(self):
        return self._cfunc.restype

    @restype.setter
    def restype(self, value):
        self._cfunc.restype = value


class _Library:
    """Stands in for ``CDLL("libnvidia-ml.so.1")``: attributes are the exported functions;
    a name that is not exported raises AttributeError (pynvml: FUNCTION_NOT_FOUND)."""

    def __repr__(self) -> str:
        return "<fake libnvidia-ml.so.1>"


class FakeNvml:
    """A fake NVML library with ``len(models)`` MIG-capable GPUs.

    ``privileged`` is root (or the mig/config capability); ``init_error`` makes
    nvmlInitWithFlags fail with that code. ``violations`` collects misuse that real NVML
    would not report reliably (bad handles, too-small buffers, wrong struct versions);
    ``errors`` collects exceptions raised inside the fake itself. ``calls`` logs every
    call by name. ``fail`` maps a function name to a return code to give once.
    """

    def __init__(self, models: Iterable[str] = ("H100-80GB",), mig_enabled: bool = True,
                 privileged: bool = True, init_error: int | None = None):
        self.gpus: list[FakeGpu] = []
        for i, model in enumerate(models):
            cat = load_catalog(model)
            name = next((a for a in cat.aliases if a.startswith("NVIDIA ")), cat.model)
            self.gpus.append(FakeGpu(i, cat, name, mig_enabled))
        self.privileged = privileged
        self.init_error = init_error
        self.init_count = 0
        self.calls: list[tuple[str, tuple]] = []
        self.violations: list[str] = []
        self.errors: list[str] = []
        self.fail: dict[str, int] = {}
        self._arg_sizes: list[list[int | None]] = []
        self._strings: dict[int, ctypes.Array] = {}
        self._next_pid = 1000
        self.lib = _Library()
        self._export_all()

    # -- installation into pynvml ------------------------------------------------------
    def install(self, monkeypatch) -> None:
        """Make the real pynvml use this library (undone by ``monkeypatch``)."""

        def no_real_library(*_a, **_k):
            raise OSError("the fake NVML is installed; no real libnvidia-ml is loaded")

        monkeypatch.setattr(pynvml, "CDLL", no_real_library)
        monkeypatch.setattr(pynvml, "nvmlLib", self.lib)
        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
        monkeypatch.setattr(pynvml, "_nvmlLib_refcount", 0)

    # -- test helpers ------------------------------------------------------------------
    def gpu(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def start_process(self, gpu_index: int, gi_id: int | None, used_bytes: int,
                      ci_id: int = 0) -> int:
        """A CUDA process on a MIG device (GI, CI) or, with gi_id None, the whole GPU."""
        g = self.gpus[gpu_index]
        self._next_pid += 1
        proc = FakeProcess(self._next_pid, used_bytes)
        if gi_id is None:
            g.processes.append(proc)
        else:
            g.gis[gi_id].cis[ci_id].processes.append(proc)
        return proc.pid

    def stop_processes(self, gpu_index: int) -> None:
        g = self.gpus[gpu_index]
        g.processes.clear()
        for gi in g.gis.values():
            for ci in gi.cis.values():
                ci.processes.clear()

    def layout(self, gpu_index: int) -> list[tuple[str, int]]:
        """(profile name, start) of each GPU instance, sorted by start."""
        return sorted(((gi.profile.name, gi.start) for gi in self.gpus[gpu_index].gis.values()),
                      key=lambda t: (t[1], t[0]))

    def called(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)

    # -- dispatch ----------------------------------------------------------------------
    def _dispatch(self, name: str, impl: Callable, args: tuple) -> int:
        self.calls.append((name, tuple(a if isinstance(a, (int, type(None))) else "*"
                                       for a in args)))
        try:
            if name not in ("nvmlInitWithFlags", "nvmlInit_v2", "nvmlErrorString") \
                    and self.init_count <= 0:
                return ERROR_UNINITIALIZED
            if name in self.fail:
                return self.fail.pop(name)
            ret = impl(*args)
            return SUCCESS if ret is None else ret
        except NvmlViolation as exc:
            self.violations.append(f"{name}: {exc}")
            return ERROR_INVALID_ARGUMENT
        except Exception:  # a bug in the fake must not look like NVML_SUCCESS
            self.errors.append(f"{name}: {traceback.format_exc()}")
            return ERROR_UNKNOWN

    def _violation(self, msg: str) -> NvmlViolation:
        return NvmlViolation(msg)

    def _capacity(self, arg_pos: int) -> int | None:
        sizes = self._arg_sizes[-1] if self._arg_sizes else []
        return sizes[arg_pos] if arg_pos < len(sizes) else None

    @staticmethod
    def _addr(ptr) -> int | None:
        return cast(ptr, c_void_p).value

    def _objects(self) -> Iterable[NvmlObject]:
        for g in self.gpus:
            yield g
            for gi in g.gis.values():
                yield gi
                for ci in gi.cis.values():
                    yield ci
                    yield ci.mig_device

    def _lookup(self, ptr, kinds: tuple[type, ...], what: str):
        addr = self._addr(ptr)
        if addr is None:
            raise self._violation(f"{what} handle is NULL")
        for obj in self._objects():
            if obj.addr == addr:
                if not isinstance(obj, kinds):
                    raise self._violation(f"{what} handle points at a {type(obj).__name__}")
                return obj
        raise self._violation(f"{what} handle {addr:#x} is not valid (destroyed or never "
                              f"returned by NVML)")

    def _device(self, ptr) -> FakeGpu | FakeMigDevice:
        return self._lookup(ptr, (FakeGpu, FakeMigDevice), "device")

    def _parent(self, ptr) -> FakeGpu:
        dev = self._device(ptr)
        if isinstance(dev, FakeMigDevice):
            # MIG device handles are not parent devices: NVML answers INVALID_ARGUMENT
            # or NOT_SUPPORTED for MIG management calls on them
            raise self._violation("a MIG device handle was passed where NVML needs the "
                                  "parent GPU handle")
        return dev

    @staticmethod
    def _need(ptr, what: str) -> None:
        if not ptr:
            raise NvmlViolation(f"{what} is NULL")

    @staticmethod
    def _out(ptr, struct: type):
        return cast(ptr, POINTER(struct)).contents

    @staticmethod
    def _set_handle(ptr, obj: NvmlObject) -> None:
        cast(ptr, POINTER(c_void_p))[0] = obj.addr

    @staticmethod
    def _write_str(buf, length: int, text: str) -> int:
        data = text.encode() + b"\0"
        if len(data) > length:
            return ERROR_INSUFFICIENT_SIZE
        ctypes.memmove(buf, data, len(data))
        return SUCCESS

    # -- exports -----------------------------------------------------------------------
    def _export(self, name: str, argtypes: list, impl: Callable, restype: Any = c_int) -> None:
        setattr(self.lib, name, _Export(self, name, restype, argtypes, impl))

    def _export_all(self) -> None:
        e = self._export
        e("nvmlInitWithFlags", [c_uint], self._init)
        e("nvmlInit_v2", [], lambda: self._init(0))
        e("nvmlShutdown", [], self._shutdown)
        e("nvmlErrorString", [c_int], self._error_string, restype=c_void_p)
        e("nvmlDeviceGetCount_v2", [P_UINT], self._get_count)
        e("nvmlDeviceGetHandleByIndex_v2", [c_uint, POINTER(DEV)], self._handle_by_index)
        e("nvmlDeviceGetName", [DEV, POINTER(c_char), c_uint], self._get_name)
        e("nvmlDeviceGetUUID", [DEV, POINTER(c_char), c_uint], self._get_uuid)
        e("nvmlDeviceGetMemoryInfo", [DEV, POINTER(pynvml.c_nvmlMemory_t)], self._memory_info)
        e("nvmlDeviceGetMigMode", [DEV, P_UINT, P_UINT], self._get_mig_mode)
        # activationStatus is nvmlReturn_t*; pynvml passes a c_uint (same size)
        e("nvmlDeviceSetMigMode", [DEV, c_uint, P_UINT], self._set_mig_mode)
        e("nvmlDeviceGetGpuInstanceProfileInfo",
          [DEV, c_uint, POINTER(pynvml.c_nvmlGpuInstanceProfileInfo_t)], self._gi_profile_v1)
        e("nvmlDeviceGetGpuInstanceProfileInfoV",
          [DEV, c_uint, POINTER(pynvml.c_nvmlGpuInstanceProfileInfo_v2_t)], self._gi_profile_v2)
        e("nvmlDeviceGetGpuInstancePossiblePlacements_v2",
          [DEV, c_uint, POINTER(pynvml.c_nvmlGpuInstancePlacement_t), P_UINT],
          self._possible_placements)
        e("nvmlDeviceCreateGpuInstanceWithPlacement",
          [DEV, c_uint, POINTER(pynvml.c_nvmlGpuInstancePlacement_t), POINTER(GI)],
          self._create_gi)
        e("nvmlGpuInstanceDestroy", [GI], self._destroy_gi)
        e("nvmlDeviceGetGpuInstances", [DEV, c_uint, POINTER(GI), P_UINT], self._get_gis)
        e("nvmlDeviceGetGpuInstanceById", [DEV, c_uint, POINTER(GI)], self._gi_by_id)
        e("nvmlGpuInstanceGetInfo", [GI, POINTER(pynvml.c_nvmlGpuInstanceInfo_t)],
          self._gi_info)
        e("nvmlGpuInstanceGetComputeInstanceProfileInfoV",
          [GI, c_uint, c_uint, POINTER(pynvml.c_nvmlComputeInstanceProfileInfo_v2_t)],
          self._ci_profile_v2)
        e("nvmlGpuInstanceCreateComputeInstance", [GI, c_uint, POINTER(CI)], self._create_ci)
        e("nvmlComputeInstanceDestroy", [CI], self._destroy_ci)
        e("nvmlGpuInstanceGetComputeInstances", [GI, c_uint, POINTER(CI), P_UINT],
          self._get_cis)
        e("nvmlGpuInstanceGetComputeInstanceById", [GI, c_uint, POINTER(CI)], self._ci_by_id)
        e("nvmlComputeInstanceGetInfo_v2", [CI, POINTER(pynvml.c_nvmlComputeInstanceInfo_t)],
          self._ci_info)
        e("nvmlDeviceIsMigDeviceHandle", [DEV, P_UINT], self._is_mig_device)
        e("nvmlDeviceGetGpuInstanceId", [DEV, P_UINT], self._mig_gi_id)
        e("nvmlDeviceGetComputeInstanceId", [DEV, P_UINT], self._mig_ci_id)
        e("nvmlDeviceGetMaxMigDeviceCount", [DEV, P_UINT], self._max_mig_devices)
        e("nvmlDeviceGetMigDeviceHandleByIndex", [DEV, c_uint, POINTER(DEV)],
          self._mig_device_by_index)
        e("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", [DEV, POINTER(DEV)],
          self._parent_of_mig_device)
        e("nvmlDeviceGetComputeRunningProcesses_v3",
          [DEV, P_UINT, POINTER(pynvml.c_nvmlProcessInfo_v3_t)], self._compute_processes)
        e("nvmlDeviceGetProcessUtilization",
          [DEV, POINTER(pynvml.c_nvmlProcessUtilizationSample_t), P_UINT, c_ulonglong],
          self._process_utilization)

    # -- init ---------------------------------------------------------------------------
    def _init(self, flags: int) -> int:
        if self.init_error is not None:
            return self.init_error
        self.init_count += 1
        return SUCCESS

    def _shutdown(self) -> int:
        self.init_count -= 1
        return SUCCESS

    def _error_string(self, code: int) -> int:
        if code not in self._strings:
            text = ERROR_STRINGS.get(code, b"Unknown Error")
            self._strings[code] = ctypes.create_string_buffer(text)
        return ctypes.addressof(self._strings[code])

    # -- devices ------------------------------------------------------------------------
    def _get_count(self, count) -> int:
        self._need(count, "deviceCount")
        count[0] = len(self.gpus)

    def _handle_by_index(self, index: int, device) -> int:
        self._need(device, "device")
        if index >= len(self.gpus):
            return ERROR_INVALID_ARGUMENT
        self._set_handle(device, self.gpus[index])

    def _get_name(self, device, buf, length: int) -> int:
        dev = self._device(device)
        self._need(buf, "name")
        if isinstance(dev, FakeMigDevice):
            name = f"{dev.ci.gi.gpu.name} MIG {dev.ci.gi.profile.name}"
        else:
            name = dev.name
        return self._write_str(buf, length, name)

    def _get_uuid(self, device, buf, length: int) -> int:
        dev = self._device(device)
        self._need(buf, "uuid")
        return self._write_str(buf, length, dev.ci.uuid if isinstance(dev, FakeMigDevice)
                               else dev.uuid)

    def _memory_info(self, device, memory) -> int:
        dev = self._device(device)
        self._need(memory, "memory")
        out = self._out(memory, Memory)
        if isinstance(dev, FakeMigDevice):
            total = dev.ci.gi.profile.memory_mib * MIB
            used = sum(p.used_bytes for p in dev.ci.processes)
        else:
            if dev.mig_on and not self.privileged:
                # nvml.h: "In MIG mode, if device handle is provided, the API returns
                # aggregate information, only if the caller has appropriate privileges."
                return ERROR_NO_PERMISSION
            total = dev.catalog.memory_mib * MIB
            used = sum(p.used_bytes for p in dev.all_processes())
        out.total, out.used, out.free = total, used, total - used

    def _get_mig_mode(self, device, current, pending) -> int:
        dev = self._parent(device)
        self._need(current, "currentMode")
        self._need(pending, "pendingMode")
        if not dev.mig_capable:
            return ERROR_NOT_SUPPORTED
        current[0], pending[0] = dev.mig_current, dev.mig_pending

    def _set_mig_mode(self, device, mode: int, status) -> int:
        dev = self._parent(device)
        self._need(status, "activationStatus")
        if mode not in (MIG_DISABLE, MIG_ENABLE):
            return ERROR_INVALID_ARGUMENT
        if not dev.mig_capable:
            return ERROR_NOT_SUPPORTED
        if not self.privileged:
            return ERROR_NO_PERMISSION
        dev.mig_pending = mode
        if mode == dev.mig_current:
            status[0] = SUCCESS
        elif dev.gis or dev.all_processes():
            # "if device unbind fails because the device isn't idle, NVML_ERROR_IN_USE
            # would be returned" in activationStatus; the change stays pending
            status[0] = ERROR_IN_USE
        elif dev.reset_required:
            status[0] = ERROR_RESET_REQUIRED
        else:
            dev.mig_current = mode
            status[0] = SUCCESS

    # -- GPU-instance profiles and placements -----------------------------------------
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

    # -- GPU instances ------------------------------------------------------------------
    def _create_gi(self, device, profile_id: int, placement, gpu_instance) -> int:
        dev = self._parent(device)
        self._need(gpu_instance, "gpuInstance")
        if not dev.mig_on:
            return ERROR_NOT_SUPPORTED
        if not self.privileged:
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
        if not self.privileged:
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

    # -- compute instances ------------------------------------------------------------
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
        if not self.privileged:
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
        if not self.privileged:
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

    # -- MIG devices --------------------------------------------------------------------
    def _is_mig_device(self, device, flag) -> int:
        dev = self._device(device)
        self._need(flag, "isMigDevice")
        flag[0] = int(isinstance(dev, FakeMigDevice))

    def _mig_only(self, device) -> FakeMigDevice | int:
        dev = self._device(device)
        if not isinstance(dev, FakeMigDevice):
            return ERROR_NOT_SUPPORTED  # "if this query is not supported by the device"
        return dev

    def _mig_gi_id(self, device, out) -> int:
        self._need(out, "id")
        dev = self._mig_only(device)
        if isinstance(dev, int):
            return dev
        out[0] = dev.ci.gi.id

    def _mig_ci_id(self, device, out) -> int:
        self._need(out, "id")
        dev = self._mig_only(device)
        if isinstance(dev, int):
            return dev
        out[0] = dev.ci.id

    def _max_mig_devices(self, device, count) -> int:
        dev = self._parent(device)
        self._need(count, "count")
        count[0] = dev.max_mig_devices  # "Returns zero if MIG is not supported or enabled"

    def _mig_device_by_index(self, device, index: int, mig_device) -> int:
        dev = self._parent(device)
        self._need(mig_device, "migDevice")
        if not dev.mig_on:
            return ERROR_NOT_SUPPORTED
        if index >= dev.max_mig_devices:
            return ERROR_INVALID_ARGUMENT
        ci = dev.mig_slots.get(index)
        if ci is None:
            return ERROR_NOT_FOUND  # "if no valid MIG device was found at index"
        self._set_handle(mig_device, ci.mig_device)

    def _parent_of_mig_device(self, mig_device, device) -> int:
        dev = self._mig_only(mig_device)
        self._need(device, "device")
        if isinstance(dev, int):
            return dev
        self._set_handle(device, dev.ci.gi.gpu)

    # -- processes ------------------------------------------------------------------------
    def _process_utilization(self, device, utilization, count, last_seen: int) -> int:
        """nvml.h: samples newer than lastSeenTimeStamp; NULL buffer -> the count and
        INSUFFICIENT_SIZE; NOT_FOUND when there is no sample; not supported in MIG mode."""
        dev = self._device(device)
        self._need(count, "processSamplesCount")
        if isinstance(dev, FakeMigDevice) or dev.mig_on:
            return ERROR_NOT_SUPPORTED
        rows = [(p.pid, ts, sm, mem) for p in dev.processes for ts, sm, mem in p.samples if ts > last_seen]
        if not rows:
            count[0] = 0
            return ERROR_NOT_FOUND
        capacity = count[0]
        count[0] = len(rows)
        if not utilization or capacity < len(rows):
            return ERROR_INSUFFICIENT_SIZE
        for k, (pid, ts, sm, mem) in enumerate(rows):
            utilization[k].pid, utilization[k].timeStamp = pid, ts
            utilization[k].smUtil, utilization[k].memUtil = sm, mem
            utilization[k].encUtil = utilization[k].decUtil = 0
        return SUCCESS

    def _compute_processes(self, device, info_count, infos) -> int:
        dev = self._device(device)
        self._need(info_count, "infoCount")
        rows: list[tuple[FakeProcess, int, int]] = []
        if isinstance(dev, FakeMigDevice):
            rows = [(p, dev.ci.gi.id, dev.ci.id) for p in dev.ci.processes]
        elif dev.mig_on:
            if not self.privileged:
                return ERROR_NO_PERMISSION  # aggregate information needs privileges
            rows = [(p, gi.id, ci.id) for gi in dev.gis.values() for ci in gi.cis.values()
                    for p in ci.processes]
        else:
            rows = [(p, UINT_MAX, UINT_MAX) for p in dev.processes]
        capacity = info_count[0]
        info_count[0] = len(rows)
        if not rows:
            return SUCCESS
        if capacity < len(rows) or not infos:
            return ERROR_INSUFFICIENT_SIZE
        cap = self._capacity(2)
        if cap is not None and cap < capacity:
            raise self._violation(f"infoCount says {capacity} but infos holds {cap}")
        arr = cast(infos, POINTER(ProcessInfoV2))
        for k, (p, gi_id, ci_id) in enumerate(rows):
            arr[k].pid, arr[k].usedGpuMemory = p.pid, p.used_bytes
            arr[k].gpuInstanceId, arr[k].computeInstanceId = gi_id, ci_id
