"""A fake ``libnvidia-ml.so.1`` for the real ``pynvml`` module (no GPU needed).

``pynvml`` loads the NVML shared library into the global ``pynvml.nvmlLib`` and looks each
C function up with ``getattr(nvmlLib, name)``. :meth:`FakeNvml.install` puts a fake library
object there instead, whose exported functions have the C prototypes of ``nvml.h`` and
reach a stateful model of one or more MIG-capable GPUs: pynvml's unmodified wrappers run,
and wrong function names, argument or struct types, struct versions, handle kinds and
buffer sizes fail here as they would (or would corrupt memory) on hardware.

This module is the entry point tests import. The fake itself is a packaged part of the
simulated GPU, ``gpus.sim.nvml`` (the dev cluster's agents load it, backed by the
simulated GPU's shared state, with ``--nvml-library simulated:DIR``); its package docstring
lists its parts.
"""
from __future__ import annotations

from gpus.sim.nvml.calls import NvmlViolation
from gpus.sim.nvml.exports import Export, Library
from gpus.sim.nvml.library import FakeNvml
from gpus.sim.nvml.model import (FakeComputeInstance, FakeGpu, FakeGpuInstance,
                                            FakeMigDevice, FakeProcess, NvmlObject)
from gpus.sim.nvml.nvml_h import (
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
