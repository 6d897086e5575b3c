"""The node agent's samples of its jobs: memory from the GPU, utilisation from its counters
(or what the job reported), the last hour of samples per job kept in memory.

On NVML a process is a pid: a job's memory is the memory of the processes that belong to it
(:mod:`.pid_jobs`: its cgroup, or its environment when its uid is the job's user) on the
job's device (its MIG instance, or the whole GPU, MPS clients included)."""
from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable

from mig.errors import MigError
from packer.samples import JobSample
from slurm_plugin.agent.counters import CounterReader, CounterReading
from slurm_plugin.agent.pid_jobs import PidJobs, PidOwner
from slurm_plugin.agent.state import Assignment

log = logging.getLogger(__name__)

SAMPLES_KEPT = 3600  # per job, in memory
GAP_AFTER_S = 10.0  # a longer stretch between two samples of a job is a gap (the agent was away)


class Sampler:
    """Samples jobs and keeps their recent samples; the running totals go into each assignment."""

    def __init__(self, node: str, backend, pid_jobs: PidJobs | None = None):
        self.node = node
        self.backend = backend
        # on real GPUs NVML names processes by pid; the simulated-GPU backend by job
        self.owners_are_pids = bool(getattr(backend, "owners_are_pids", False))
        self.pid_jobs = pid_jobs or PidJobs()
        self.counters = CounterReader(backend, pid_to_job=self.job_of_pid)
        self.recent: dict[int, deque[JobSample]] = {}
        self._users: dict[int, int | None] = {}  # this node's jobs -> their user's uid
        self._owners: dict[int, PidOwner] = {}  # this round's answers
        self._said: set[tuple[int, str]] = set()

    def job_of_pid(self, pid: int) -> int | None:
        """The job a GPU process belongs to (None: none of this node's jobs)."""
        found = self._owners.get(pid)
        if found is None:
            found = self._owners[pid] = self.pid_jobs.owner(pid, self._users)
            if found.job_id is None and (pid, found.how) not in self._said:
                self._said.add((pid, found.how))
                log.info("GPU process %d counts for no job: %s", pid, found.how[len("none: "):])
        return found.job_id

    def memory(self, a: Assignment) -> tuple[int, int]:
        """(bytes in use now, peak bytes) of the job's memory on its device."""
        if self.owners_are_pids:
            if a.gpu_index < 0:
                return 0, 0
            self._users.setdefault(a.job_id, a.uid)
            used = sum(p.used_bytes for p in self.backend.process_memory(a.gpu_index, a.gi_id)
                       if p.owner.isdigit() and self.job_of_pid(int(p.owner)) == a.job_id)
            return used, max(used, a.peak_mem_bytes)
        mem_of = getattr(self.backend, "memory_of", None)
        if mem_of is not None:
            recs = mem_of(a.owner)
            return (sum(r["current"] for r in recs.values()), max((r["peak"] for r in recs.values()), default=0))
        if a.gpu_index < 0:
            return 0, 0
        used = sum(p.used_bytes for p in self.backend.process_memory(a.gpu_index, a.gi_id)
                   if p.owner == a.owner)
        return used, max(used, a.peak_mem_bytes)

    def sample(self, a: Assignment, now: float, counted: CounterReading | None = None) -> JobSample:
        """One sample of the job; its utilisation from the GPU's counters when they gave
        one this round (``counted``), else what the job reported (``util_source``)."""
        cur, peak = self.memory(a)
        if a.last_sampled_at is not None and now - a.last_sampled_at > GAP_AFTER_S:
            a.gap_s += now - a.last_sampled_at
        a.last_sampled_at = now
        if a.first_sampled_at is None:
            a.first_sampled_at = now
        a.last_mem_bytes = cur
        a.peak_mem_bytes = max(a.peak_mem_bytes, peak, cur)
        a.samples += 1
        if counted is not None and counted.util_pct is not None:
            util, source = counted.util_pct, counted.source
        elif a.util_pct is not None:
            util, source = a.util_pct, "report"
        else:
            util, source = None, counted.source if counted is not None else None
        if util is not None:
            a.util_sum += util
            a.util_n += 1
        if a.throughput is not None:
            a.throughput_sum += a.throughput
            a.throughput_n += 1
        sample = JobSample(job_id=a.job_id, node=self.node, gpu_index=a.gpu_index, at=now,
                           mem_bytes=cur, peak_mem_bytes=a.peak_mem_bytes, util_pct=util,
                           throughput=a.throughput, iterations=a.iterations,
                           isolation=a.isolation, started_at=a.started_at, util_source=source,
                           last_checkpoint_at=a.last_checkpoint_at, checkpoint_every_s=a.checkpoint_every_s)
        self.recent.setdefault(a.job_id, deque(maxlen=SAMPLES_KEPT)).append(sample)
        return sample

    def sample_all(self, jobs: Iterable[Assignment], now: float) -> None:
        """One round: the counters read once, then every job sampled."""
        jobs = list(jobs)
        self._users = {a.job_id: a.uid for a in jobs}
        self._owners = {}
        if len(self._said) > 1000:
            self._said.clear()
        counted = self.counters.read(jobs)
        for a in jobs:
            try:
                self.sample(a, now, counted.get(a.job_id))
            except MigError as exc:
                log.warning("job %d: cannot read its memory: %s", a.job_id, exc)

    def forget(self, job_id: int) -> None:
        self.recent.pop(job_id, None)

    def samples(self, job_id: int | None = None, since: float | None = None,
                latest: bool = False) -> list[dict]:
        """The kept samples (of one job, or all), newer than ``since``; or each job's latest."""
        ids = [job_id] if job_id is not None else sorted(self.recent)
        out: list[dict] = []
        for j in ids:
            buf = self.recent.get(j)
            if not buf:
                continue
            if latest:
                out.append(buf[-1].to_dict())
            else:
                out.extend(s.to_dict() for s in buf if since is None or s.at > since)
        return out
