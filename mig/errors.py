"""Errors shared by the MIG state machine and every GPU backend (NVML and simulated).

Each error names what failed (GPU, profile, placement, device) and what to do about it,
so the node agent can log it and the CLI can print it as one ``Error:`` line.
"""
from __future__ import annotations


class MigError(Exception):
    """Base class of every MIG error."""


class UnknownGpuModelError(MigError, KeyError):
    """No catalogue for this GPU model."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown GPU model"


class UnknownProfileError(MigError, KeyError):
    """A profile name that the catalogue does not hold."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown profile"


class InvalidPlacementError(MigError):
    """The placement does not exist for the profile, overlaps an instance, or exceeds a limit."""


class InsufficientResourcesError(MigError):
    """Not enough free slices (NVML_ERROR_INSUFFICIENT_RESOURCES)."""


class InUseError(MigError):
    """The instance or GPU is in use (NVML_ERROR_IN_USE): a process or job holds it."""


class NoPermissionError(MigError):
    """Changing MIG configuration needs root (NVML_ERROR_NO_PERMISSION)."""


class MigDisabledError(MigError):
    """A MIG operation on a GPU whose MIG mode is off."""


class MigEnabledError(MigError):
    """A whole-GPU operation (e.g. memory allocation) on a GPU whose MIG mode is on."""


class NotFoundError(MigError):
    """No such GPU, GPU instance or device (NVML_ERROR_NOT_FOUND)."""


class GpuOutOfMemoryError(MigError):
    """An allocation past the capacity of the GPU or MIG device."""


class DevicesUnavailableError(MigError):
    """A CUDA context the device's compute mode does not allow (EXCLUSIVE_PROCESS with
    another context on it, or PROHIBITED): CUDA's "all CUDA-capable devices are busy or
    unavailable"."""


class BackendUnavailableError(MigError):
    """The backend cannot be used here (no NVML library, no driver, no state file)."""


class PlacementOccupiedError(InsufficientResourcesError, InvalidPlacementError):
    """The placement overlaps an existing instance or a limit is reached (NVML answers
    INSUFFICIENT_RESOURCES); catchable as either parent."""


class CountersUnavailableError(BackendUnavailableError):
    """A utilisation counter this backend cannot read here (e.g. per-MIG-instance activity,
    which only DCGM's profiling fields give); the message says where it can be read, and
    ``reason`` is a short code for it (a metric's label: few values)."""

    def __init__(self, message: str, reason: str = "unsupported"):
        super().__init__(message)
        self.reason = reason
