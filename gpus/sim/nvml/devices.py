"""The C functions of library start-up and of whole devices: init and shutdown, error
strings, device count and handles, names and UUIDs, the MIG mode (current/pending,
activation status) and the compute mode."""
from __future__ import annotations

import ctypes

from .calls import NvmlCalls
from .model import FakeMigDevice
from .nvml_h import (COMPUTE_MODE_NAMES, ERROR_IN_USE, ERROR_INVALID_ARGUMENT, ERROR_NO_PERMISSION,
                     ERROR_NOT_SUPPORTED, ERROR_RESET_REQUIRED, ERROR_STRINGS, MIG_DISABLE,
                     MIG_ENABLE, SUCCESS)
from .privileges import PrivilegeRules


class DeviceCalls(NvmlCalls, PrivilegeRules):
    """nvmlInit*/nvmlShutdown/nvmlErrorString and the nvmlDevice* identity and MIG-mode
    calls."""

    init_error: int | None  # nvmlInitWithFlags returns this code, when set
    _strings: dict[int, ctypes.Array]  # nvmlErrorString's answers stay allocated

    # -- init ----------------------------------------------------------------------------
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

    # -- devices -------------------------------------------------------------------------
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

    def _get_minor_number(self, device, minor) -> int:
        dev = self._device(device)
        self._need(minor, "minorNumber")
        if isinstance(dev, FakeMigDevice):  # a MIG device has no /dev/nvidia<N> of its own
            return ERROR_NOT_SUPPORTED
        minor[0] = dev.minor

    # -- MIG mode ------------------------------------------------------------------------
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
        if not self._may_configure():
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

    # -- compute mode --------------------------------------------------------------------
    def _compute_target(self, device):
        """What holds the compute mode of ``device``: the GPU, or a MIG device's compute
        instance. NVML: "If MIG is enabled on a GPU, device must be MIG device handle"; the
        code it answers for a parent handle there is a plausible choice (NOT_SUPPORTED)."""
        dev = self._device(device)
        if isinstance(dev, FakeMigDevice):
            return dev.ci
        return None if dev.mig_on else dev

    def _get_compute_mode(self, device, mode) -> int:
        target = self._compute_target(device)
        self._need(mode, "mode")
        if target is None:
            return ERROR_NOT_SUPPORTED
        mode[0] = target.compute_mode

    def _set_compute_mode(self, device, mode: int) -> int:
        """Takes effect at once for new contexts; needs root (NO_PERMISSION otherwise)."""
        target = self._compute_target(device)
        if mode not in COMPUTE_MODE_NAMES:  # EXCLUSIVE_THREAD's support is removed
            return ERROR_INVALID_ARGUMENT
        if target is None:
            return ERROR_NOT_SUPPORTED
        if not self._may_set_compute_mode():
            return ERROR_NO_PERMISSION
        target.compute_mode = mode
