"""The interface every GPU backend offers (NVML on real GPUs, the simulated GPU elsewhere).

Both backends raise the same :mod:`mig.errors` classes, so the node agent handles a
refusal the same way whether it came from the driver or from the simulator.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable

from mig.catalog import Catalog
from mig.fsm import PartitionState, get_space


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str  # GPU-<uuid>
    model: str  # catalogue model name
    name: str  # the name the device reports
    memory_mib: int
    mig_enabled: bool

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class MigInstance:
    """A GPU instance with its full-size compute instance (one MIG device)."""

    gpu_index: int
    gi_id: int
    profile: str
    start: int  # memory slices
    size: int  # memory slices
    ci_id: int | None
    uuid: str | None  # MIG-<uuid> of the MIG device (None without a compute instance)
    memory_mib: int
    busy: bool
    owner: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ProcessMemory:
    """Memory held on a whole GPU or a MIG device by one owner (a job id or a pid)."""

    device_uuid: str
    owner: str
    used_bytes: int
    peak_bytes: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


# compute modes (nvmlComputeMode_t), by name: what a device allows of CUDA contexts
COMPUTE_DEFAULT = "DEFAULT"  # any number of contexts
COMPUTE_EXCLUSIVE_PROCESS = "EXCLUSIVE_PROCESS"  # one context (an MPS server's, shared by its clients)
COMPUTE_PROHIBITED = "PROHIBITED"  # none
COMPUTE_MODES = (COMPUTE_DEFAULT, COMPUTE_EXCLUSIVE_PROCESS, COMPUTE_PROHIBITED)


@runtime_checkable
class GpuBackend(Protocol):
    """What the node agent and the CLI need from a GPU backend."""

    def list_gpus(self) -> list[GpuInfo]: ...

    def catalog(self, gpu_index: int) -> Catalog: ...

    def mig_mode(self, gpu_index: int) -> bool: ...

    def set_mig_mode(self, gpu_index: int, enabled: bool) -> None: ...

    def list_instances(self, gpu_index: int) -> list[MigInstance]: ...

    def partition_state(self, gpu_index: int,
                        profiles: tuple[str, ...] | None = None) -> PartitionState: ...

    def create_instance(self, gpu_index: int, profile: str, start: int,
                        owner: str | None = None) -> MigInstance: ...

    def destroy_instance(self, gpu_index: int, gi_id: int) -> None: ...

    def device_uuids(self, gpu_index: int) -> dict[int, str]: ...

    def device_minor(self, gpu_index: int) -> int:
        """The GPU's device minor (``/dev/nvidia<minor>``), which names it in the driver's MIG
        capability files; not always its index."""

    def process_memory(self, gpu_index: int, gi_id: int | None = None) -> list[ProcessMemory]: ...

    def compute_mode(self, gpu_index: int, gi_id: int | None = None) -> str: ...

    def set_compute_mode(self, gpu_index: int, gi_id: int | None, mode: str) -> None:
        """The compute mode of a whole GPU (``gi_id`` None, MIG off) or of the MIG device
        of one GPU instance (on a MIG-enabled GPU only its MIG devices have one)."""


def partition_state_of(catalog: Catalog, instances: list[MigInstance],
                       profiles: tuple[str, ...] | None = None) -> PartitionState:
    """A GPU's partition state: its instances as placements in its catalogue's space."""
    return PartitionState.from_placements(get_space(catalog, profiles),
                                          [(i.profile, i.start) for i in instances])


@dataclass(frozen=True)
class ProcessUtilization:
    """One sample of one process's use of a whole GPU (nvmlDeviceGetProcessUtilization).

    ``sm_pct``/``mem_pct`` are integer percentages over the driver's sampling period, as
    NVML reports them; ``at_us`` is the sample's timestamp in microseconds."""

    device_uuid: str
    owner: str  # a pid on real GPUs, the job id on the simulated one
    at_us: int
    sm_pct: int
    mem_pct: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class InstanceActivity:
    """Graphics-engine activity of one MIG GPU instance over a sampling period, 0.0-1.0
    (DCGM's profiling field DCGM_FI_PROF_GR_ENGINE_ACTIVE, per GPU instance)."""

    device_uuid: str
    gi_id: int
    at_us: int
    gr_active: float

    def to_dict(self) -> dict:
        return asdict(self)
