"""A fake ``libnvidia-ml.so.1`` for the real ``pynvml`` module (no GPU needed).

``pynvml`` loads the NVML shared library into the global ``pynvml.nvmlLib`` and looks each
C function up with ``getattr(nvmlLib, name)``. :meth:`FakeNvml.install` puts a fake library
object there instead, whose exported functions have the C prototypes of ``nvml.h`` and
reach a stateful model of one or more MIG-capable GPUs: pynvml's unmodified wrappers run,
and wrong function names, argument or struct types, struct versions, handle kinds and
buffer sizes fail here as they would (or would corrupt memory) on hardware.

This module is the entry point tests import; the fake lives in the package ``fake_nvml``
next to it, one module per part:

- ``fake_nvml/nvml_h.py``: return codes, constants and struct layouts from ``nvml.h``;
- ``fake_nvml/exports.py``: the ctypes side (typed handles and out-parameters, by-value
  structs, buffer sizes) and what it checks;
- ``fake_nvml/model.py``: the model of the GPUs, and what in it is known from the
  documentation and what is only a plausible choice;
- ``fake_nvml/calls.py``, ``privileges.py``, ``devices.py``, ``gpu_instances.py``,
  ``compute_instances.py``, ``mig_devices.py``, ``processes.py``, ``utilization.py``:
  the C functions, by area;
- ``fake_nvml/library.py``: :class:`FakeNvml` (export table, installation, test helpers).
"""
from __future__ import annotations

from fake_nvml.calls import NvmlViolation
from fake_nvml.exports import Export, Library
from fake_nvml.library import FakeNvml
from fake_nvml.model import (FakeComputeInstance, FakeGpu, FakeGpuInstance, FakeMigDevice,
                             FakeProcess, NvmlObject)
from fake_nvml.nvml_h import (
    CI, CI_PROFILE_INFO_V2, CI_PROFILE_SLICES, CI_SLICES_OFFERED,
    COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, DEV, ERROR_DRIVER_NOT_LOADED, ERROR_IN_USE,
    ERROR_INSUFFICIENT_RESOURCES, ERROR_INSUFFICIENT_SIZE, ERROR_INVALID_ARGUMENT,
    ERROR_NO_PERMISSION, ERROR_NOT_FOUND, ERROR_NOT_SUPPORTED, ERROR_RESET_REQUIRED,
    ERROR_STRINGS, ERROR_UNINITIALIZED, ERROR_UNKNOWN, GI, GI_PROFILE_INFO_V2,
    GPU_INSTANCE_PROFILE_COUNT, MIB, MIG_DISABLE, MIG_ENABLE, P_UINT, SUCCESS, UINT_MAX,
    ComputeInstanceInfo, ComputeInstancePlacement, ComputeInstanceProfileInfo,
    ComputeInstanceProfileInfoV2, GpuInstanceInfo, GpuInstancePlacement,
    GpuInstanceProfileInfo, GpuInstanceProfileInfoV2, Memory, ProcessInfoV2, struct_version)

__all__ = [
    "FakeNvml", "NvmlViolation", "Export", "Library",
    "FakeComputeInstance", "FakeGpu", "FakeGpuInstance", "FakeMigDevice", "FakeProcess",
    "NvmlObject",
    "CI", "CI_PROFILE_INFO_V2", "CI_PROFILE_SLICES", "CI_SLICES_OFFERED",
    "COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED", "DEV", "ERROR_DRIVER_NOT_LOADED", "ERROR_IN_USE",
    "ERROR_INSUFFICIENT_RESOURCES", "ERROR_INSUFFICIENT_SIZE", "ERROR_INVALID_ARGUMENT",
    "ERROR_NO_PERMISSION", "ERROR_NOT_FOUND", "ERROR_NOT_SUPPORTED", "ERROR_RESET_REQUIRED",
    "ERROR_STRINGS", "ERROR_UNINITIALIZED", "ERROR_UNKNOWN", "GI", "GI_PROFILE_INFO_V2",
    "GPU_INSTANCE_PROFILE_COUNT", "MIB", "MIG_DISABLE", "MIG_ENABLE", "P_UINT", "SUCCESS",
    "UINT_MAX",
    "ComputeInstanceInfo", "ComputeInstancePlacement", "ComputeInstanceProfileInfo",
    "ComputeInstanceProfileInfoV2", "GpuInstanceInfo", "GpuInstancePlacement",
    "GpuInstanceProfileInfo", "GpuInstanceProfileInfoV2", "Memory", "ProcessInfoV2",
    "struct_version",
]
