"""Who may do what: the privilege rules of the MIG user guide, in one place.

Creating and destroying GPU and compute instances and changing the MIG mode need root or
the ``mig/config`` capability; without it NVML answers ``NVML_ERROR_NO_PERMISSION``.
Aggregate memory and process queries on a MIG-enabled *parent* device need privileges
too; the same queries on a MIG device handle, or on a GPU with MIG off, do not.
"""
from __future__ import annotations

from .model import FakeGpu


class PrivilegeRules:
    """Mixin of the C functions that check privileges (``privileged`` is set by
    :class:`~.library.FakeNvml`; tests change it to drop root)."""

    privileged: bool  # root, or the mig/config capability

    def _may_configure(self) -> bool:
        """Create or destroy GPU/compute instances, set the MIG mode."""
        return self.privileged

    def _may_set_compute_mode(self) -> bool:
        """nvmlDeviceSetComputeMode: "Requires root/admin permissions"."""
        return self.privileged

    def _may_read_aggregate(self, gpu: FakeGpu) -> bool:
        """nvml.h: "In MIG mode, if device handle is provided, the API returns aggregate
        information, only if the caller has appropriate privileges"."""
        return self.privileged or not gpu.mig_on
