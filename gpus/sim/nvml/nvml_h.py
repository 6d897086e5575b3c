"""What the fake repeats from ``nvml.h``: return codes, constants and struct layouts.

They are repeated, not imported from pynvml: the C side writes through the caller's pointers
with these layouts, and pynvml's own copies are checked against them at import (a size or
version that differs fails when the test module loads).
"""
from __future__ import annotations

from ctypes import POINTER, Structure, c_char, c_uint, c_ulonglong, c_void_p, sizeof

import pynvml

MIB = 1024 * 1024  # NVML counts memory in bytes, the catalogues in MiB

# --- return codes and constants (values from nvml.h; repeated, not imported) ------------
SUCCESS = 0
ERROR_UNINITIALIZED = 1
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_INSUFFICIENT_SIZE = 7
ERROR_DRIVER_NOT_LOADED = 9
ERROR_RESET_REQUIRED = 16
ERROR_IN_USE = 19
ERROR_INSUFFICIENT_RESOURCES = 23
ERROR_UNKNOWN = 999

MIG_DISABLE, MIG_ENABLE = 0, 1
# nvmlComputeMode_t (EXCLUSIVE_THREAD: "Support Removed")
COMPUTEMODE_DEFAULT, COMPUTEMODE_EXCLUSIVE_THREAD, COMPUTEMODE_PROHIBITED = 0, 1, 2
COMPUTEMODE_EXCLUSIVE_PROCESS = 3
COMPUTE_MODE_NAMES = {COMPUTEMODE_DEFAULT: "DEFAULT", COMPUTEMODE_PROHIBITED: "PROHIBITED",
                      COMPUTEMODE_EXCLUSIVE_PROCESS: "EXCLUSIVE_PROCESS"}  # the simulated GPU's names
GPU_INSTANCE_PROFILE_COUNT = 0x12  # as in the nvml.h that nvidia-ml-py 12.5xx+ mirrors
COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0
# NVML_COMPUTE_INSTANCE_PROFILE_* index -> compute slices (1_SLICE_REV1 and 7_SLICE_NVL
# are not offered on H100)
CI_PROFILE_SLICES = {0x0: 1, 0x1: 2, 0x2: 3, 0x3: 4, 0x4: 7, 0x5: 8, 0x6: 6}
CI_SLICES_OFFERED = (1, 2, 3, 4, 7)  # what `nvidia-smi mig -lcip` lists on Hopper/Ampere
UINT_MAX = 0xFFFFFFFF

ERROR_STRINGS = {
    SUCCESS: b"Success", ERROR_UNINITIALIZED: b"Uninitialized",
    ERROR_INVALID_ARGUMENT: b"Invalid Argument", ERROR_NOT_SUPPORTED: b"Not Supported",
    ERROR_NO_PERMISSION: b"Insufficient Permissions", ERROR_NOT_FOUND: b"Not Found",
    ERROR_INSUFFICIENT_SIZE: b"Insufficient Size",
    ERROR_DRIVER_NOT_LOADED: b"Driver Not Loaded",
    ERROR_RESET_REQUIRED: b"GPU requires restart", ERROR_IN_USE: b"In use by another client",
    ERROR_INSUFFICIENT_RESOURCES: b"Insufficient resources", ERROR_UNKNOWN: b"Unknown Error",
}


# --- nvml.h struct layouts (own copies, so pynvml's are cross-checked) ------------------
class GpuInstancePlacement(Structure):
    _fields_ = [("start", c_uint), ("size", c_uint)]


class GpuInstanceProfileInfo(Structure):  # v1, unversioned
    _fields_ = [("id", c_uint), ("isP2pSupported", c_uint), ("sliceCount", c_uint),
                ("instanceCount", c_uint), ("multiprocessorCount", c_uint),
                ("copyEngineCount", c_uint), ("decoderCount", c_uint),
                ("encoderCount", c_uint), ("jpegCount", c_uint), ("ofaCount", c_uint),
                ("memorySizeMB", c_ulonglong)]


class GpuInstanceProfileInfoV2(Structure):
    _fields_ = [("version", c_uint)] + GpuInstanceProfileInfo._fields_ + [
        ("name", c_char * 96)]


class GpuInstanceInfo(Structure):
    _fields_ = [("device", c_void_p), ("id", c_uint), ("profileId", c_uint),
                ("placement", GpuInstancePlacement)]


class ComputeInstancePlacement(Structure):
    _fields_ = [("start", c_uint), ("size", c_uint)]


class ComputeInstanceProfileInfo(Structure):  # v1
    _fields_ = [("id", c_uint), ("sliceCount", c_uint), ("instanceCount", c_uint),
                ("multiprocessorCount", c_uint), ("sharedCopyEngineCount", c_uint),
                ("sharedDecoderCount", c_uint), ("sharedEncoderCount", c_uint),
                ("sharedJpegCount", c_uint), ("sharedOfaCount", c_uint)]


class ComputeInstanceProfileInfoV2(Structure):
    _fields_ = [("version", c_uint)] + ComputeInstanceProfileInfo._fields_ + [
        ("name", c_char * 96)]


class ComputeInstanceInfo(Structure):
    _fields_ = [("device", c_void_p), ("gpuInstance", c_void_p), ("id", c_uint),
                ("profileId", c_uint), ("placement", ComputeInstancePlacement)]


class Memory(Structure):
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class ProcessInfoV2(Structure):  # nvmlProcessInfo_v2_t == nvmlProcessInfo_t (v3 API)
    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong), ("gpuInstanceId", c_uint),
                ("computeInstanceId", c_uint)]


def struct_version(struct: type, ver: int) -> int:
    """NVML_STRUCT_VERSION(data, ver): sizeof | ver << 24."""
    return sizeof(struct) | (ver << 24)


GI_PROFILE_INFO_V2 = struct_version(GpuInstanceProfileInfoV2, 2)
CI_PROFILE_INFO_V2 = struct_version(ComputeInstanceProfileInfoV2, 2)

for _own, _theirs in [
    (GpuInstancePlacement, pynvml.c_nvmlGpuInstancePlacement_t),
    (GpuInstanceProfileInfo, pynvml.c_nvmlGpuInstanceProfileInfo_t),
    (GpuInstanceProfileInfoV2, pynvml.c_nvmlGpuInstanceProfileInfo_v2_t),
    (GpuInstanceInfo, pynvml.c_nvmlGpuInstanceInfo_t),
    (ComputeInstanceProfileInfoV2, pynvml.c_nvmlComputeInstanceProfileInfo_v2_t),
    (ComputeInstanceInfo, pynvml.c_nvmlComputeInstanceInfo_t),
    (Memory, pynvml.c_nvmlMemory_t),
    (ProcessInfoV2, pynvml.c_nvmlProcessInfo_v3_t),
]:
    assert sizeof(_own) == sizeof(_theirs), (_own.__name__, sizeof(_own), sizeof(_theirs))
assert GI_PROFILE_INFO_V2 == pynvml.nvmlGpuInstanceProfileInfo_v2
assert CI_PROFILE_INFO_V2 == pynvml.nvmlComputeInstanceProfileInfo_v2

# pointer types of the C prototypes (pynvml's, so ctypes checks what callers pass)
DEV = pynvml.c_nvmlDevice_t
GI = pynvml.c_nvmlGpuInstance_t
CI = pynvml.c_nvmlComputeInstance_t
P_UINT = POINTER(c_uint)
