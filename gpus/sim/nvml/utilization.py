"""Utilisation sample counters: the per-process samples the driver holds for a whole GPU
(``FakeProcess.samples``), read with nvmlDeviceGetProcessUtilization."""
from __future__ import annotations

from .calls import NvmlCalls
from .model import FakeGpu, FakeMigDevice, FakeProcess
from .nvml_h import ERROR_INSUFFICIENT_SIZE, ERROR_NOT_FOUND, ERROR_NOT_SUPPORTED, SUCCESS


class UtilizationCalls(NvmlCalls):
    """nvmlDeviceGetProcessUtilization."""

    def _samples_of(self, gpu: FakeGpu, proc: FakeProcess) -> list[tuple[int, int, int]]:
        """The samples the driver holds for a process: (timestamp us, smUtil, memUtil)."""
        return proc.samples

    def _process_utilization(self, device, utilization, count, last_seen: int) -> int:
        """nvml.h: samples newer than lastSeenTimeStamp; NULL buffer -> the count and
        INSUFFICIENT_SIZE; NOT_FOUND when there is no sample; not supported in MIG mode."""
        dev = self._device(device)
        self._need(count, "processSamplesCount")
        if isinstance(dev, FakeMigDevice) or dev.mig_on:
            return ERROR_NOT_SUPPORTED
        rows = [(p.pid, ts, sm, mem) for p in dev.processes
                for ts, sm, mem in self._samples_of(dev, p) if ts > last_seen]
        if not rows:
            count[0] = 0
            return ERROR_NOT_FOUND
        capacity = count[0]
        count[0] = len(rows)
        if not utilization or capacity < len(rows):
            return ERROR_INSUFFICIENT_SIZE
        for k, (pid, ts, sm, mem) in enumerate(rows):
            utilization[k].pid, utilization[k].timeStamp = pid, ts
            utilization[k].smUtil, utilization[k].memUtil = sm, mem
            utilization[k].encUtil = utilization[k].decUtil = 0
        return SUCCESS
