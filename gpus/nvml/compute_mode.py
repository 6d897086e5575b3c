"""The compute mode of a whole GPU or of a MIG device, through NVML.

``nvmlDeviceSetComputeMode`` needs root (NO_PERMISSION otherwise) and takes effect at once
for new CUDA contexts; on Linux it is not kept across a reboot (back to DEFAULT). On a
MIG-enabled GPU the mode belongs to each MIG device: the call takes the MIG device handle,
not the parent's. EXCLUSIVE_PROCESS allows one context on the device: with an MPS server
running there, its clients share the server's context and any other process is refused
("all CUDA-capable devices are busy or unavailable").
"""
from __future__ import annotations

import logging

from mig.backend import COMPUTE_MODES
from mig.errors import MigError, NoPermissionError, NotFoundError
from gpus.nvml.instances import NvmlInstances
from gpus.nvml.session import NvmlSession

log = logging.getLogger(__name__)


class NvmlComputeMode:
    """Reads and sets compute modes (by name, :data:`mig.backend.COMPUTE_MODES`)."""

    def __init__(self, session: NvmlSession, instances: NvmlInstances):
        self.session = session
        self.instances = instances
        nv = session.nv
        self._codes = {"DEFAULT": nv.NVML_COMPUTEMODE_DEFAULT, "PROHIBITED": nv.NVML_COMPUTEMODE_PROHIBITED,
                       "EXCLUSIVE_PROCESS": nv.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS}

    def _device(self, gpu_index: int, gi_id: int | None):
        """The handle that holds the mode: the GPU's, or the MIG device's of GPU instance ``gi_id``."""
        h = self.session.handle(gpu_index)
        if gi_id is None:
            return h, f"GPU {gpu_index}"
        found = self.instances.mig_devices(h, gpu_index).get(gi_id)
        if found is None:
            raise NotFoundError(f"GPU {gpu_index}: no MIG device of GPU instance {gi_id} to set a compute mode on")
        return found[0], f"GPU {gpu_index} GI {gi_id}"

    def get(self, gpu_index: int, gi_id: int | None = None) -> str:
        handle, where = self._device(gpu_index, gi_id)
        code = self.session.call(self.session.nv.nvmlDeviceGetComputeMode, handle,
                                 what=f"{where}: read its compute mode")
        return next((name for name, c in self._codes.items() if c == code), f"UNKNOWN({code})")

    def set(self, gpu_index: int, gi_id: int | None, mode: str) -> None:
        if mode not in COMPUTE_MODES:
            raise ValueError(f"compute mode {mode!r} is not one of {', '.join(COMPUTE_MODES)}")
        nv = self.session.nv
        handle, where = self._device(gpu_index, gi_id)
        what = f"{where}: set compute mode {mode}"
        try:
            nv.nvmlDeviceSetComputeMode(handle, self._codes[mode])
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) == nv.NVML_ERROR_NO_PERMISSION:
                raise NoPermissionError(f"{what}: NVML says {exc}; setting a compute mode needs root "
                                        f"(run the node agent as root)") from exc
            if getattr(exc, "value", None) == nv.NVML_ERROR_NOT_SUPPORTED:
                raise MigError(f"{what}: NVML says {exc}; on a MIG-enabled GPU set it on a MIG "
                               f"device, and check that this GPU supports compute modes") from exc
            raise self.session.translate(exc, what) from exc
        log.info("%s: compute mode %s", where, mode)
