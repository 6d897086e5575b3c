"""The NVML backend: MIG on real GPUs through ``pynvml`` (package ``nvidia-ml-py``).

The only modules of :mod:`mig` that touch NVML are this one and its parts, ``pynvml``
imported when the backend is created:

- :mod:`gpus.nvml.session` NVML's calls, with its errors translated; device handles, MIG mode;
- :mod:`gpus.nvml.catalog` the MIG profiles and placements NVML reports;
- :mod:`gpus.nvml.instances` GPU instances (list, create, destroy) and their MIG devices;
- :mod:`gpus.nvml.counters` memory per process and utilisation counters;
- :mod:`gpus.nvml.compute_mode` the compute mode of a GPU or MIG device (EXCLUSIVE_PROCESS
  under an MPS daemon).

Notes that matter on hardware:

- a GPU instance is created at a placement whose ``size`` is in **memory slices** (from the
  possible placements), not the profile's ``sliceCount`` (compute slices);
- ``nvmlDeviceGetGpuInstanceProfileInfo`` takes the profile *index*
  (``NVML_GPU_INSTANCE_PROFILE_*``); create/list calls take the profile *id* it returns;
- each GPU instance gets one full-size compute instance (shared engines); destroy removes
  the compute instances first, then the GPU instance;
- NVML errors become :mod:`mig.errors` classes (IN_USE, INSUFFICIENT_RESOURCES,
  NO_PERMISSION, MIG disabled/NOT_SUPPORTED, NOT_FOUND), each naming GPU, profile and
  placement, and what to do;
- ``nvmlDeviceSetMigMode`` succeeds when the mode is set; whether it was activated comes
  back in its activation status (IN_USE while the GPU is busy), which is checked;
- utilisation counters: per-process samples on a whole GPU (or MPS) come from
  ``nvmlDeviceGetProcessUtilization`` (NOT_SUPPORTED in MIG mode); activity per MIG
  instance exists only in DCGM's profiling fields (``DCGM_FI_PROF_GR_ENGINE_ACTIVE``), read
  through ``dcgmi`` when the backend is given one (``dcgm``, :mod:`gpus.dcgm.dcgmi`); without
  it :meth:`NvmlBackend.instance_activity` raises :class:`CountersUnavailableError` saying
  so, and the agent degrades to what jobs report;
- reading needs no root, but the whole-GPU memory of a MIG-enabled GPU is only reported to
  privileged callers; without it the static table's value is used.

Tested end to end through the real pynvml against a fake libnvidia-ml
(tests/unit/gpus/fake_libnvml.py).
"""

from __future__ import annotations

import logging
from typing import Any

from mig.backend import GpuInfo, InstanceActivity, MigInstance, ProcessMemory, ProcessUtilization, partition_state_of
from mig.catalog import Catalog
from mig.errors import MigDisabledError
from mig.fsm import PartitionState
from gpus.nvml.catalog import NvmlCatalogReader, static_catalog
from gpus.nvml.compute_mode import NvmlComputeMode
from gpus.nvml.counters import NvmlCounters
from gpus.nvml.instances import NvmlInstances
from gpus.nvml.session import MIB, NvmlSession, import_pynvml, text

log = logging.getLogger(__name__)

__all__ = ["MIB", "NvmlBackend", "import_pynvml"]


class NvmlBackend:
    """MIG management of this node's GPUs through NVML (a :class:`mig.backend.GpuBackend`)."""

    owners_are_pids = True  # NVML names a process by its pid (the agent maps pids to jobs)

    def __init__(self, nvml: Any | None = None, dcgm: Any | None = None):
        self.session = NvmlSession(nvml)
        self.dcgm = dcgm  # a gpus.dcgm.dcgmi.DcgmiActivity (None: no DCGM)
        self.nv = self.session.nv
        self._catalogs: dict[int, Catalog] = {}
        self._reader = NvmlCatalogReader(self.session)
        self._instances = NvmlInstances(self.session, self.catalog)
        self._counters = NvmlCounters(self.session, self._instances, dcgm)
        self._compute = NvmlComputeMode(self.session, self._instances)

    def close(self) -> None:
        if self.dcgm is not None:
            self.dcgm.close()
        self.session.close()

    # -- devices and MIG mode ---------------------------------------------------------------
    def list_gpus(self) -> list[GpuInfo]:
        s = self.session
        out = []
        for i in range(s.call(self.nv.nvmlDeviceGetCount, what="count GPUs")):
            h = s.handle(i)
            name = text(s.call(self.nv.nvmlDeviceGetName, h, what=f"GPU {i}: read its name"))
            uuid = text(s.call(self.nv.nvmlDeviceGetUUID, h, what=f"GPU {i}: read its UUID"))
            static = static_catalog(name)
            model = static.model if static else name
            mem = s.memory_mib(h, i, static)
            out.append(GpuInfo(i, uuid, model, name, mem or 0, s.mig_on(h, i)))
        return out

    def mig_mode(self, gpu_index: int) -> bool:
        return self.session.mig_on(self.session.handle(gpu_index), gpu_index)

    def set_mig_mode(self, gpu_index: int, enabled: bool) -> None:
        s = self.session
        nv = self.nv
        h = s.handle(gpu_index)
        mode = nv.NVML_DEVICE_MIG_ENABLE if enabled else nv.NVML_DEVICE_MIG_DISABLE
        what = f"GPU {gpu_index}: switch MIG mode {'on' if enabled else 'off'}"
        self._catalogs.pop(gpu_index, None)
        # the call succeeds when the mode is *set*; whether it was *activated* comes back in
        # activationStatus (nvml.h: IN_USE when the GPU is not idle, RESET_REQUIRED where
        # a reset is not possible from here)
        status = s.call(nv.nvmlDeviceSetMigMode, h, mode, what=what)
        if isinstance(status, int) and status not in (nv.NVML_SUCCESS,
                                                      nv.NVML_ERROR_RESET_REQUIRED):
            raise s.translate(nv.NVMLError(status),
                              f"{what}: the change is pending, not activated")
        current, pending = s.call(nv.nvmlDeviceGetMigMode, h,
                                  what=f"GPU {gpu_index}: read MIG mode")
        if current != pending:
            log.warning("GPU %s: MIG mode change is pending; it takes effect after a GPU reset "
                        "(`nvidia-smi -i %s -r` with no process on the GPU)", gpu_index, gpu_index)

    # -- catalogue ------------------------------------------------------------------------
    def read_catalog(self, gpu_index: int) -> Catalog:
        """The catalogue as NVML reports it (profile info and possible placements)."""
        return self._reader.read(gpu_index)

    def catalog(self, gpu_index: int) -> Catalog:
        """The GPU's catalogue: as NVML reports it in MIG mode; with MIG off (an MPS or
        whole-GPU node) NVML reports no profiles, so the static table of its model."""
        if gpu_index in self._catalogs:
            return self._catalogs[gpu_index]
        s = self.session
        h = s.handle(gpu_index)
        if not s.mig_on(h, gpu_index):
            name = text(s.call(self.nv.nvmlDeviceGetName, h, what=f"GPU {gpu_index}: read its name"))
            static = static_catalog(name)
            if static is None:
                raise MigDisabledError(f"GPU {gpu_index} ({name}) is not in MIG mode and has no "
                                       f"static catalogue (mig/data); enable MIG mode to read its profiles")
            return static
        self._catalogs[gpu_index] = self.read_catalog(gpu_index)
        return self._catalogs[gpu_index]

    # -- instances ------------------------------------------------------------------------
    def list_instances(self, gpu_index: int) -> list[MigInstance]:
        return self._instances.instances(gpu_index)

    def partition_state(self, gpu_index: int,
                        profiles: tuple[str, ...] | None = None) -> PartitionState:
        """The partition state of one GPU: its instances (as NVML lists them) as placements."""
        return partition_state_of(self.catalog(gpu_index), self.list_instances(gpu_index), profiles)

    def create_instance(self, gpu_index: int, profile: str, start: int,
                        owner: str | None = None) -> MigInstance:
        return self._instances.create(gpu_index, profile, start, owner)

    def destroy_instance(self, gpu_index: int, gi_id: int) -> None:
        self._instances.destroy(gpu_index, gi_id)

    def device_uuids(self, gpu_index: int) -> dict[int, str]:
        return self._instances.device_uuids(gpu_index)

    def device_minor(self, gpu_index: int) -> int:
        s = self.session
        return int(s.call(self.nv.nvmlDeviceGetMinorNumber, s.handle(gpu_index),
                          what=f"GPU {gpu_index}: read its device minor (/dev/nvidia<N>)"))

    # -- compute mode ---------------------------------------------------------------------
    def compute_mode(self, gpu_index: int, gi_id: int | None = None) -> str:
        return self._compute.get(gpu_index, gi_id)

    def set_compute_mode(self, gpu_index: int, gi_id: int | None, mode: str) -> None:
        self._compute.set(gpu_index, gi_id, mode)

    # -- memory and utilisation counters -------------------------------------------------
    def process_memory(self, gpu_index: int, gi_id: int | None = None) -> list[ProcessMemory]:
        """Memory per process on the whole GPU, or on one MIG device (by GI id)."""
        return self._counters.process_memory(gpu_index, gi_id)

    def process_utilization(self, gpu_index: int, since_us: int = 0) -> list[ProcessUtilization]:
        """Per-process SM/memory utilisation samples newer than ``since_us`` on a whole GPU."""
        return self._counters.process_utilization(gpu_index, since_us)

    def instance_activity(self, gpu_index: int) -> list[InstanceActivity]:
        """Activity per MIG GPU instance: a DCGM profiling field, read through ``dcgmi``."""
        return self._counters.instance_activity(gpu_index)
