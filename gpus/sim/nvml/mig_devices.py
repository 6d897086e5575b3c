"""The C functions of MIG device handles: what a MIG device is (its GPU and compute
instance ids), the MIG devices of a parent GPU by index, and the way back to the parent."""
from __future__ import annotations

from .calls import NvmlCalls
from .model import FakeMigDevice
from .nvml_h import ERROR_INVALID_ARGUMENT, ERROR_NOT_FOUND, ERROR_NOT_SUPPORTED


class MigDeviceCalls(NvmlCalls):
    """nvmlDeviceIsMigDeviceHandle, nvmlDeviceGet{Gpu,Compute}InstanceId,
    nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMigDeviceHandleByIndex and
    nvmlDeviceGetDeviceHandleFromMigDeviceHandle."""

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
