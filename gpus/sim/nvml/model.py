"""The model behind the fake NVML: one or more MIG-capable GPUs and what lives on them.

It is built from the static catalogues in ``mig/data`` (the same tables the planner uses):
GPU-instance profiles (index -> id, memory/compute slices, instance counts, placements in
memory slices), GPU instances with placement checks (a placement NVML does not list ->
``NVML_ERROR_INVALID_ARGUMENT``; overlap, compute slices, instance or media-extension
limit -> ``NVML_ERROR_INSUFFICIENT_RESOURCES``), compute instances, MIG device handles
and ``MIG-`` UUIDs, processes per compute instance (destroy refused with
``NVML_ERROR_IN_USE``), MIG mode (current/pending, activation status), the compute mode of each whole GPU and MIG
device, and the
privilege rules of the MIG user guide (create/destroy and mode changes need root or the
``mig/config`` capability -> ``NVML_ERROR_NO_PERMISSION``; aggregate memory and process
queries on a MIG-enabled parent device need privileges). The checks and return codes are
in the C functions (:mod:`.devices`, :mod:`.gpu_instances`, :mod:`.compute_instances`,
:mod:`.mig_devices`, :mod:`.processes`, :mod:`.utilization`, :mod:`.privileges`); this
module holds the state they read and change.

What is *not* known from the documentation and is only a plausible choice here:
GPU-instance ids (a buddy-tree numbering with the full GPU at 0), the order of MIG
device indices (a slot per compute instance, reused after destroy, so holes appear),
and the exact error code real drivers give in a few corner cases (noted inline).
"""
from __future__ import annotations

import ctypes
import uuid as uuidlib
from dataclasses import dataclass, field

from mig.catalog import Catalog, Profile

from .nvml_h import CI_PROFILE_SLICES, CI_SLICES_OFFERED, COMPUTEMODE_DEFAULT, MIG_DISABLE, MIG_ENABLE


class NvmlObject:
    """Something a handle points at; its address is the handle value."""

    def __init__(self) -> None:
        self._cell = ctypes.create_string_buffer(16)  # real memory, so handles are unique

    @property
    def addr(self) -> int:
        return ctypes.addressof(self._cell)


@dataclass(eq=False)
class FakeProcess:
    """A CUDA process on a whole GPU or a compute instance."""

    pid: int
    used_bytes: int
    # utilisation samples the driver holds for it: (timestamp us, smUtil, memUtil)
    samples: list = field(default_factory=list)
    mps: bool = False  # an MPS client: listed by the MPS call only, as on hardware


class FakeComputeInstance(NvmlObject):
    """A compute instance inside a GPU instance, with its MIG device and processes."""

    def __init__(self, gi: "FakeGpuInstance", ci_id: int, profile_index: int, slices: int,
                 start: int, slot: int, uuid: str):
        super().__init__()
        self.gi, self.id, self.profile_index, self.slices = gi, ci_id, profile_index, slices
        self.start, self.slot, self.uuid = start, slot, uuid
        self.processes: list[FakeProcess] = []
        self.mig_device = FakeMigDevice(self)
        self.compute_mode = COMPUTEMODE_DEFAULT  # its MIG device's (a new instance starts at DEFAULT)


class FakeMigDevice(NvmlObject):
    """The MIG device (an ``nvmlDevice_t``) of one compute instance."""

    def __init__(self, ci: FakeComputeInstance):
        super().__init__()
        self.ci = ci


class FakeGpuInstance(NvmlObject):
    """A GPU instance of one profile at a placement (``start``, ``size`` in memory slices)."""

    def __init__(self, gpu: "FakeGpu", gi_id: int, profile: Profile, start: int):
        super().__init__()
        self.gpu, self.id, self.profile, self.start = gpu, gi_id, profile, start
        self.size = profile.memory_slices
        self.cis: dict[int, FakeComputeInstance] = {}

    @property
    def mem_mask(self) -> int:
        return ((1 << self.size) - 1) << self.start

    def ci_profile(self, index: int) -> tuple[int, int] | None:
        """(slices, instance count) of a compute-instance profile index in this GI."""
        slices = CI_PROFILE_SLICES.get(index)
        gi_slices = self.profile.compute_slices
        if slices is None or slices not in CI_SLICES_OFFERED or slices > gi_slices:
            return None
        return slices, gi_slices // slices


class FakeGpu(NvmlObject):
    """One MIG-capable GPU of a catalogue model: MIG mode, GPU instances, MIG device slots."""

    def __init__(self, index: int, catalog: Catalog, name: str, mig_enabled: bool):
        super().__init__()
        self.index, self.catalog, self.name = index, catalog, name
        self.minor = index  # /dev/nvidia<minor>: the driver's numbering, not always NVML's order
        self.uuid = f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_OID, f'fake-gpu-{index}')}"
        self.mig_current = self.mig_pending = MIG_ENABLE if mig_enabled else MIG_DISABLE
        self.gis: dict[int, FakeGpuInstance] = {}
        self.processes: list[FakeProcess] = []  # whole-GPU processes (MIG off)
        self.compute_mode = COMPUTEMODE_DEFAULT  # Linux: DEFAULT after every boot
        self.mig_slots: dict[int, FakeComputeInstance] = {}
        self.generation = 0
        self.mig_capable = True
        self.reset_required = False  # SetMigMode leaves the change pending (VM passthrough)

    @property
    def mig_on(self) -> bool:
        return self.mig_current == MIG_ENABLE

    @property
    def max_mig_devices(self) -> int:
        return self.catalog.compute_slices if self.mig_on else 0

    def profile_by_index(self, index: int) -> Profile | None:
        return next((p for p in self.catalog.profiles if p.nvml_profile_index == index), None)

    def profile_by_id(self, pid: int) -> Profile | None:
        return next((p for p in self.catalog.profiles if p.profile_id == pid), None)

    def gi_id_for(self, start: int, size: int) -> int:
        """Illustrative GI id: buddy-tree numbering (whole GPU 0, halves 1-2, quarters
        3-6, eighths 7-14); unique among live GPU instances since they cannot overlap."""
        total = self.catalog.memory_slices
        if size and total % size == 0 and start % size == 0 and (total // size) & (
                total // size - 1) == 0:
            gid = total // size - 1 + start // size
            if gid not in self.gis:
                return gid
        return next(i for i in range(64) if i not in self.gis)

    def all_processes(self) -> list[FakeProcess]:
        """The whole-GPU processes and those of every compute instance."""
        out = list(self.processes)
        for gi in self.gis.values():
            for ci in gi.cis.values():
                out.extend(ci.processes)
        return out
