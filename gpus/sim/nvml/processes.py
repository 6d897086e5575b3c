"""Processes and the memory they use: the C functions that report them (memory info,
running compute processes, MPS clients) and the test helpers that start and stop them.

As on hardware, a process that runs as an MPS client is listed only by
``nvmlDeviceGetMPSComputeRunningProcesses_v3``, and the plain call
(``nvmlDeviceGetComputeRunningProcesses_v3``) lists only the other processes."""
from __future__ import annotations

from ctypes import POINTER, cast

from .calls import NvmlCalls
from .model import FakeMigDevice, FakeProcess
from .nvml_h import (ERROR_INSUFFICIENT_SIZE, ERROR_NO_PERMISSION, MIB, SUCCESS, UINT_MAX,
                     Memory, ProcessInfoV2)
from .privileges import PrivilegeRules


class ProcessCalls(NvmlCalls, PrivilegeRules):
    """nvmlDeviceGetMemoryInfo, nvmlDeviceGetComputeRunningProcesses_v3 and
    nvmlDeviceGetMPSComputeRunningProcesses_v3, on a whole GPU (MIG off or, with
    privileges, the aggregate over its instances) or a MIG device."""

    _next_pid: int  # the last pid given to a fake process

    # -- test helpers --------------------------------------------------------------------
    def start_process(self, gpu_index: int, gi_id: int | None, used_bytes: int,
                      ci_id: int = 0, mps: bool = False, pid: int | None = None) -> int:
        """A CUDA process on a MIG device (GI, CI) or, with gi_id None, the whole GPU
        (``mps``: as an MPS client; ``pid``: a real process's, else a made-up one)."""
        g = self.gpus[gpu_index]
        if pid is None:
            self._next_pid += 1
            pid = self._next_pid
        proc = FakeProcess(pid, used_bytes, mps=mps)
        if gi_id is None:
            g.processes.append(proc)
        else:
            g.gis[gi_id].cis[ci_id].processes.append(proc)
        return proc.pid

    def stop_processes(self, gpu_index: int) -> None:
        g = self.gpus[gpu_index]
        g.processes.clear()
        for gi in g.gis.values():
            for ci in gi.cis.values():
                ci.processes.clear()

    # -- C functions ---------------------------------------------------------------------
    def _memory_info(self, device, memory) -> int:
        dev = self._device(device)
        self._need(memory, "memory")
        out = self._out(memory, Memory)
        if isinstance(dev, FakeMigDevice):
            total = dev.ci.gi.profile.memory_mib * MIB
            used = sum(p.used_bytes for p in dev.ci.processes)
        else:
            if not self._may_read_aggregate(dev):
                return ERROR_NO_PERMISSION
            total = dev.catalog.memory_mib * MIB
            used = sum(p.used_bytes for p in dev.all_processes())
        out.total, out.used, out.free = total, used, total - used

    def _compute_processes(self, device, info_count, infos) -> int:
        return self._list_processes(device, info_count, infos, mps=False)

    def _mps_processes(self, device, info_count, infos) -> int:
        return self._list_processes(device, info_count, infos, mps=True)

    def _list_processes(self, device, info_count, infos, mps: bool) -> int:
        dev = self._device(device)
        self._need(info_count, "infoCount")
        rows: list[tuple[FakeProcess, int, int]] = []
        if isinstance(dev, FakeMigDevice):
            rows = [(p, dev.ci.gi.id, dev.ci.id) for p in dev.ci.processes]
        elif dev.mig_on:
            if not self._may_read_aggregate(dev):
                return ERROR_NO_PERMISSION
            rows = [(p, gi.id, ci.id) for gi in dev.gis.values() for ci in gi.cis.values()
                    for p in ci.processes]
        else:
            rows = [(p, UINT_MAX, UINT_MAX) for p in dev.processes]
        rows = [r for r in rows if r[0].mps == mps]
        capacity = info_count[0]
        info_count[0] = len(rows)
        if not rows:
            return SUCCESS
        if capacity < len(rows) or not infos:
            return ERROR_INSUFFICIENT_SIZE
        cap = self._capacity(2)
        if cap is not None and cap < capacity:
            raise self._violation(f"infoCount says {capacity} but infos holds {cap}")
        arr = cast(infos, POINTER(ProcessInfoV2))
        for k, (p, gi_id, ci_id) in enumerate(rows):
            arr[k].pid, arr[k].usedGpuMemory = p.pid, p.used_bytes
            arr[k].gpuInstanceId, arr[k].computeInstanceId = gi_id, ci_id
