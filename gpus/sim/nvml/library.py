"""The fake library itself: :class:`FakeNvml` builds the GPUs, exports the C functions
with their ``nvml.h`` prototypes, installs itself into pynvml, and offers the helpers
tests use to look at and change the model."""
from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char, c_int, c_uint, c_ulonglong, c_void_p
from typing import Any, Callable, Iterable

import pynvml

from mig.catalog import load_catalog

from .compute_instances import ComputeInstanceCalls
from .devices import DeviceCalls
from .exports import Export, Library
from .gpu_instances import GpuInstanceCalls
from .mig_devices import MigDeviceCalls
from .model import FakeGpu
from .nvml_h import CI, DEV, GI, P_UINT
from .processes import ProcessCalls
from .utilization import UtilizationCalls


class FakeNvml(DeviceCalls, GpuInstanceCalls, ComputeInstanceCalls, MigDeviceCalls,
               ProcessCalls, UtilizationCalls):
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
        self.lib = Library()
        self._export_all()

    # -- installation into pynvml --------------------------------------------------------
    def install(self, monkeypatch) -> None:
        """Make the real pynvml use this library (undone by ``monkeypatch``)."""

        def no_real_library(*_a, **_k):
            raise OSError("the fake NVML is installed; no real libnvidia-ml is loaded")

        monkeypatch.setattr(pynvml, "CDLL", no_real_library)
        monkeypatch.setattr(pynvml, "nvmlLib", self.lib)
        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
        monkeypatch.setattr(pynvml, "_nvmlLib_refcount", 0)

    # -- test helpers --------------------------------------------------------------------
    def gpu(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def layout(self, gpu_index: int) -> list[tuple[str, int]]:
        """(profile name, start) of each GPU instance, sorted by start."""
        return sorted(((gi.profile.name, gi.start) for gi in self.gpus[gpu_index].gis.values()),
                      key=lambda t: (t[1], t[0]))

    def called(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)

    # -- exports -------------------------------------------------------------------------
    def _export(self, name: str, argtypes: list, impl: Callable, restype: Any = c_int) -> None:
        setattr(self.lib, name, Export(self, name, restype, argtypes, impl))

    def _export_all(self) -> None:
        """The export table: each C function with its ``nvml.h`` prototype and the method
        that implements it. A name not listed here is FUNCTION_NOT_FOUND in pynvml."""
        e = self._export
        e("nvmlInitWithFlags", [c_uint], self._init)
        e("nvmlInit_v2", [], lambda: self._init(0))
        e("nvmlShutdown", [], self._shutdown)
        e("nvmlErrorString", [c_int], self._error_string, restype=c_void_p)
        e("nvmlDeviceGetCount_v2", [P_UINT], self._get_count)
        e("nvmlDeviceGetHandleByIndex_v2", [c_uint, POINTER(DEV)], self._handle_by_index)
        e("nvmlDeviceGetName", [DEV, POINTER(c_char), c_uint], self._get_name)
        e("nvmlDeviceGetUUID", [DEV, POINTER(c_char), c_uint], self._get_uuid)
        e("nvmlDeviceGetMinorNumber", [DEV, P_UINT], self._get_minor_number)
        e("nvmlDeviceGetMemoryInfo", [DEV, POINTER(pynvml.c_nvmlMemory_t)], self._memory_info)
        e("nvmlDeviceGetMigMode", [DEV, P_UINT, P_UINT], self._get_mig_mode)
        # activationStatus is nvmlReturn_t*; pynvml passes a c_uint (same size)
        e("nvmlDeviceSetMigMode", [DEV, c_uint, P_UINT], self._set_mig_mode)
        e("nvmlDeviceGetComputeMode", [DEV, P_UINT], self._get_compute_mode)
        e("nvmlDeviceSetComputeMode", [DEV, c_uint], self._set_compute_mode)
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
        e("nvmlDeviceGetMPSComputeRunningProcesses_v3",
          [DEV, P_UINT, POINTER(pynvml.c_nvmlProcessInfo_v3_t)], self._mps_processes)
        e("nvmlDeviceGetProcessUtilization",
          [DEV, POINTER(pynvml.c_nvmlProcessUtilizationSample_t), P_UINT, c_ulonglong],
          self._process_utilization)
