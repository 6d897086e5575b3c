"""The node agent's reading of the GPU's own utilisation counters, per job.

A job need not say anything about itself: on a whole GPU or an MPS share the agent reads
NVML's per-process utilisation samples (``process_utilization``: every sample since the
last one it saw, pids mapped to jobs), and on a MIG slice the activity of the job's GPU
instance (``instance_activity``, DCGM's ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``). Each round a
job gets the mean of its new samples, in percent, and where the value came from.

Where a counter cannot be read (per-instance activity on a node without DCGM, an older
driver), the job's reading says ``unavailable: <reason>: <why>`` (``reason`` a short code,
:func:`packer.samples.unavailable_reason`); the agent logs it once per GPU and reason, counts
it in a metric (``unavailable``: GPU -> (reason, jobs) of the last round) and goes on, and
the helper falls back on what the job reports, if anything.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mig.errors import CountersUnavailableError, MigError
from slurm_plugin.agent.state import Assignment

log = logging.getLogger(__name__)

NVML_PROCESS = "nvml-process"  # nvmlDeviceGetProcessUtilization, smUtil
DCGM_GR_ACTIVE = "dcgm-gr-active"  # DCGM_FI_PROF_GR_ENGINE_ACTIVE of the job's GPU instance


@dataclass(frozen=True)
class CounterReading:
    """One job's utilisation this round: a percentage from the GPU's counters, or why none."""

    util_pct: float | None
    source: str  # NVML_PROCESS | DCGM_GR_ACTIVE | "unavailable: <reason>: <why>"
    samples: int = 0


class CounterReader:
    """Reads the counters of the GPUs that hold jobs; remembers NVML's last-seen timestamp."""

    def __init__(self, backend, pid_to_job: Callable[[int], int | None] | None = None):
        self.backend = backend
        # on real GPUs NVML names processes by pid; the simulated GPU names them by job
        self.owners_are_pids = bool(getattr(backend, "owners_are_pids", False))
        self.pid_to_job = pid_to_job
        self.last_seen_us: dict[int, int] = {}
        self._said: set[tuple[int, str]] = set()
        self.unavailable: dict[int, tuple[str, int]] = {}  # GPU -> (reason, jobs), the last round

    def read(self, jobs: Iterable[Assignment]) -> dict[int, CounterReading]:
        by_gpu: dict[int, list[Assignment]] = defaultdict(list)
        for a in jobs:
            if a.gpu_index >= 0 and a.device_uuid:
                by_gpu[a.gpu_index].append(a)
        out: dict[int, CounterReading] = {}
        unavailable: dict[int, tuple[str, int]] = {}
        for gpu, assigned in sorted(by_gpu.items()):
            try:
                if any(a.kind == "mig" or a.gi_id is not None for a in assigned):
                    out.update(self._instances(gpu, assigned))
                else:
                    out.update(self._processes(gpu, assigned))
            except (CountersUnavailableError, AttributeError) as exc:
                if isinstance(exc, MigError):
                    why, reason = str(exc), getattr(exc, "reason", "unsupported")
                else:
                    why, reason = "this GPU backend has no utilisation counters", "no-counters"
                if (gpu, reason) not in self._said:
                    self._said.add((gpu, reason))
                    log.warning("GPU %d: no utilisation counters for its jobs (%s): %s", gpu, reason, why)
                unavailable[gpu] = (reason, len(assigned))
                out.update({a.job_id: CounterReading(None, f"unavailable: {reason}: {why}") for a in assigned})
            except MigError as exc:  # a driver hiccup: no reading this round
                log.info("GPU %d: utilisation counters not read: %s", gpu, exc)
        self.unavailable = unavailable
        return out

    def _processes(self, gpu: int, assigned: list[Assignment]) -> dict[int, CounterReading]:
        samples = self.backend.process_utilization(gpu, self.last_seen_us.get(gpu, 0))
        if samples:
            self.last_seen_us[gpu] = max(s.at_us for s in samples)
        by_owner = {a.owner: a.job_id for a in assigned}
        values: dict[int, list[int]] = defaultdict(list)
        for s in samples:
            job = self._job_of(s.owner, by_owner)
            if job is not None:
                values[job].append(s.sm_pct)
        return {job: CounterReading(sum(v) / len(v), NVML_PROCESS, len(v)) for job, v in values.items()}

    def _job_of(self, owner: str, by_owner: dict[str, int]) -> int | None:
        if not self.owners_are_pids:
            return by_owner.get(owner)
        job = self.pid_to_job(int(owner)) if owner.isdigit() and self.pid_to_job else None
        return job if job in by_owner.values() else None

    def _instances(self, gpu: int, assigned: list[Assignment]) -> dict[int, CounterReading]:
        activity = {x.gi_id: x for x in self.backend.instance_activity(gpu)}
        out = {}
        for a in assigned:
            x = activity.get(a.gi_id)
            if x is not None:
                out[a.job_id] = CounterReading(100.0 * x.gr_active, DCGM_GR_ACTIVE, 1)
        return out
