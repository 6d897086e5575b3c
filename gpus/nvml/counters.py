"""What NVML says about the processes on a GPU: their memory, their utilisation samples.

Per-process samples on a whole GPU (or an MPS share) come from
``nvmlDeviceGetProcessUtilization`` (NOT_SUPPORTED in MIG mode); activity per MIG
instance exists only in DCGM's profiling fields (``DCGM_FI_PROF_GR_ENGINE_ACTIVE``), which
is not read here: :meth:`NvmlCounters.instance_activity` raises
:class:`CountersUnavailableError` saying so, and the agent degrades to what jobs report.
"""
from __future__ import annotations

from typing import Any

from mig.backend import InstanceActivity, ProcessMemory, ProcessUtilization
from mig.errors import CountersUnavailableError, NotFoundError
from gpus.nvml.instances import NvmlInstances
from gpus.nvml.session import NvmlSession, text


class NvmlCounters:
    """Memory per process and utilisation counters of this node's GPUs."""

    def __init__(self, session: NvmlSession, instances: NvmlInstances):
        self.session = session
        self.instances = instances

    def process_memory(self, gpu_index: int, gi_id: int | None = None) -> list[ProcessMemory]:
        """Memory per process on the whole GPU, or on one MIG device (by GI id)."""
        s = self.session
        h = s.handle(gpu_index)
        targets: list[tuple[Any, str]]
        if s.mig_on(h, gpu_index):
            devices = self.instances.mig_devices(h, gpu_index)
            if gi_id is None:
                targets = [(m, u) for m, u, _ in devices.values()]
            elif gi_id in devices:
                targets = [devices[gi_id][:2]]
            else:
                raise NotFoundError(f"GPU {gpu_index}: no MIG device for GPU instance {gi_id}")
        else:
            uuid = text(s.call(s.nv.nvmlDeviceGetUUID, h, what=f"GPU {gpu_index}: UUID"))
            targets = [(h, uuid)]
        out = []
        for handle, uuid in targets:
            for p in s.processes(handle, f"GPU {gpu_index}: processes on {uuid}", mps_clients=True):
                used = getattr(p, "usedGpuMemory", None)
                out.append(ProcessMemory(uuid, str(p.pid), int(used or 0)))
        return out

    def process_utilization(self, gpu_index: int, since_us: int = 0) -> list[ProcessUtilization]:
        """Per-process SM/memory utilisation samples newer than ``since_us`` on a whole GPU."""
        s = self.session
        nv = s.nv
        h = s.handle(gpu_index)
        where = f"GPU {gpu_index}: read per-process utilisation"
        if s.mig_on(h, gpu_index):
            raise CountersUnavailableError(
                f"{where}: the GPU is in MIG mode, where NVML gives no per-process utilisation; "
                f"activity per MIG instance needs DCGM (DCGM_FI_PROF_GR_ENGINE_ACTIVE)")
        uuid = text(s.call(nv.nvmlDeviceGetUUID, h, what=f"GPU {gpu_index}: UUID"))
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(h, int(since_us))
        except nv.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in (nv.NVML_ERROR_NOT_FOUND, nv.NVML_SUCCESS):
                return []  # no sample newer than since_us
            if code == nv.NVML_ERROR_NOT_SUPPORTED:
                raise CountersUnavailableError(
                    f"{where}: NVML says {exc}; this GPU or driver keeps no per-process "
                    f"utilisation samples, so only jobs that report their progress are watched") from exc
            raise s.translate(exc, where) from exc
        return [ProcessUtilization(uuid, str(int(p.pid)), int(p.timeStamp), int(p.smUtil), int(p.memUtil))
                for p in samples]

    @staticmethod
    def instance_activity(gpu_index: int) -> list[InstanceActivity]:
        """Not available through NVML: activity per MIG GPU instance is a DCGM profiling field."""
        raise CountersUnavailableError(
            f"GPU {gpu_index}: activity per MIG instance is only available through DCGM's "
            f"profiling field DCGM_FI_PROF_GR_ENGINE_ACTIVE (per GPU instance), which the NVML "
            f"backend does not read; contention on MIG slices is seen only for jobs that report "
            f"their progress (`gpupack report`)")
