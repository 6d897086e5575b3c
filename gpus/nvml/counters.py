"""What NVML says about the processes on a GPU: their memory, their utilisation samples.

Per-process samples on a whole GPU (or an MPS share) come from
``nvmlDeviceGetProcessUtilization`` (NOT_SUPPORTED in MIG mode); activity per MIG
instance exists only in DCGM's profiling fields (``DCGM_FI_PROF_GR_ENGINE_ACTIVE``), read
through ``dcgmi`` (:mod:`gpus.dcgm.dcgmi`, gpupack.toml ``[agent] dcgmi``) and matched to
NVML's MIG devices by GPU instance id. Without DCGM :meth:`NvmlCounters.instance_activity`
raises :class:`CountersUnavailableError` saying so, and the agent degrades to what jobs report.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mig.backend import InstanceActivity, ProcessMemory, ProcessUtilization
from mig.errors import CountersUnavailableError, NotFoundError
from gpus.nvml.instances import NvmlInstances
from gpus.nvml.session import NvmlSession, text

if TYPE_CHECKING:
    from gpus.dcgm.dcgmi import DcgmiActivity


class NvmlCounters:
    """Memory per process and utilisation counters of this node's GPUs."""

    def __init__(self, session: NvmlSession, instances: NvmlInstances, dcgm: DcgmiActivity | None = None):
        self.session = session
        self.instances = instances
        self.dcgm = dcgm

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
                f"activity per MIG instance needs DCGM (DCGM_FI_PROF_GR_ENGINE_ACTIVE)", reason="nvml-mig")
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
                    f"utilisation samples, so only jobs that report their progress are watched",
                    reason="nvml-unsupported") from exc
            raise s.translate(exc, where) from exc
        return [ProcessUtilization(uuid, str(int(p.pid)), int(p.timeStamp), int(p.smUtil), int(p.memUtil))
                for p in samples]

    def instance_activity(self, gpu_index: int) -> list[InstanceActivity]:
        """DCGM_FI_PROF_GR_ENGINE_ACTIVE of each MIG device's GPU instance that DCGM has a new
        value for (through ``dcgmi``); CountersUnavailableError without DCGM."""
        where = f"GPU {gpu_index}: activity per MIG instance"
        if self.dcgm is None:
            raise CountersUnavailableError(
                f"{where} is only available through DCGM's profiling field DCGM_FI_PROF_GR_ENGINE_ACTIVE "
                f"(per GPU instance), and no dcgmi is configured (gpupack.toml [agent] dcgmi); contention on "
                f"MIG slices is seen only for jobs that report their progress (`gpupack report`)", reason="no-dcgm")
        s = self.session
        h = s.handle(gpu_index)
        if not s.mig_on(h, gpu_index):
            raise CountersUnavailableError(f"{where}: the GPU is not in MIG mode", reason="nvml-not-mig")
        devices = self.instances.mig_devices(h, gpu_index)
        try:
            values = self.dcgm.activity(gpu_index, devices)
        except CountersUnavailableError as exc:
            raise CountersUnavailableError(f"{where} (DCGM): {exc}", reason=exc.reason) from exc
        return [InstanceActivity(devices[gi][1], gi, int(v.at * 1e6), v.gr_active) for gi, v in sorted(values.items())]
