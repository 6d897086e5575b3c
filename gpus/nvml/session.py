"""One node's NVML: the calls every part of the NVML backend makes, with NVML's errors
turned into :mod:`mig.errors` classes that name what was tried and what to do.

``pynvml`` (package ``nvidia-ml-py``) is imported when the session opens.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from mig.catalog import Catalog
from mig.errors import (
    BackendUnavailableError,
    InUseError,
    InvalidPlacementError,
    MigDisabledError,
    MigError,
    NoPermissionError,
    NotFoundError,
    PlacementOccupiedError,
)

log = logging.getLogger(__name__)

MIB = 1024 * 1024


def import_pynvml():
    try:
        import pynvml  # noqa: PLC0415 - only the NVML backend needs it
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise BackendUnavailableError(
            "pynvml is not installed; `pip install nvidia-ml-py` or use the simulated backend"
        ) from exc
    return pynvml


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlSession:
    """NVML initialised once; device handles, MIG mode, processes; errors translated."""

    def __init__(self, nvml: Any | None = None):
        self.nv = nvml if nvml is not None else import_pynvml()
        self.call(self.nv.nvmlInit, what="initialise NVML")

    def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except self.nv.NVMLError:  # pragma: no cover
            pass

    # -- errors ---------------------------------------------------------------------------
    def translate(self, exc: Exception, what: str) -> MigError:
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

    def call(self, fn: Callable, *args: Any, what: str) -> Any:
        try:
            return fn(*args)
        except self.nv.NVMLError as exc:
            raise self.translate(exc, what) from exc

    # -- devices --------------------------------------------------------------------------
    def handle(self, gpu_index: int):
        return self.call(self.nv.nvmlDeviceGetHandleByIndex, gpu_index,
                         what=f"GPU {gpu_index}: open the device")

    def memory_mib(self, handle, gpu_index: int, static: Catalog | None) -> int | None:
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
                raise self.translate(exc, f"GPU {gpu_index}: read its memory") from exc
            log.debug("GPU %s: total memory not readable (%s); using the static table",
                      gpu_index, exc)
            return static.memory_mib if static else None

    def mig_on(self, handle, gpu_index: int) -> bool:
        nv = self.nv
        try:
            current, _pending = nv.nvmlDeviceGetMigMode(handle)
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) == nv.NVML_ERROR_NOT_SUPPORTED:
                return False  # not a MIG-capable GPU
            raise self.translate(exc, f"GPU {gpu_index}: read MIG mode") from exc
        return current == nv.NVML_DEVICE_MIG_ENABLE

    def require_mig(self, handle, gpu_index: int, what: str) -> None:
        if not self.mig_on(handle, gpu_index):
            raise MigDisabledError(
                f"GPU {gpu_index}: cannot {what}: MIG mode is off; enable it with "
                f"`nvidia-smi -i {gpu_index} -mig 1` as root (may need a GPU reset)")

    def processes(self, handle, what: str, mps_clients: bool = False) -> list:
        """The compute processes on a whole GPU or a MIG device; with ``mps_clients`` also
        the MPS clients, which NVML lists only through its MPS call (the plain call shows
        the MPS server instead)."""
        out = list(self.call(self.nv.nvmlDeviceGetComputeRunningProcesses, handle, what=what) or [])
        if mps_clients:
            nv = self.nv
            try:
                clients = nv.nvmlDeviceGetMPSComputeRunningProcesses(handle) or []
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) not in (nv.NVML_ERROR_NOT_SUPPORTED,
                                                       nv.NVML_ERROR_FUNCTION_NOT_FOUND):
                    raise self.translate(exc, f"{what} (MPS clients)") from exc
                clients = []  # an older driver: no MPS call
            seen = {int(p.pid) for p in out}
            out += [p for p in clients if int(p.pid) not in seen]
        return out
