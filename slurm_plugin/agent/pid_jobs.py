"""Which Slurm job a GPU process belongs to.

NVML names a process by its pid only. The agent maps it to a job, most trusted first:

1. **the process's cgroup** (``/proc/PID/cgroup``), where Slurm's cgroup plugins put every
   task of a step (proctrack/cgroup, task/cgroup):

   - cgroup v1: ``/slurm/uid_<uid>/job_<job>/step_<step>/task_<n>`` under each controller,
     ``/slurm_<nodename>/…`` with several slurmd per host;
   - cgroup v2: ``/system.slice/slurmstepd.scope/job_<job>/step_<step>/user/task_<n>``,
     ``<nodename>_slurmstepd.scope`` with several slurmd per host.

   A process in a Slurm job's cgroup belongs to that job and no other.
2. **the process's environment** (``SLURM_JOB_ID`` in ``/proc/PID/environ``), which the
   process itself could have changed; trusted only when the job is one of this node's, the
   process's real uid is the job's user, and no cgroup names another job. This is the path
   on nodes without Slurm cgroups (proctrack/linuxproc, the dev cluster).

Anything else is no job's: its memory counts for nobody (and is never another job's).
"""
from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

_V1 = re.compile(r"/slurm(?:_[^/]+)?/uid_\d+/job_(?P<job>\d+)(?:/|$)")
_V2 = re.compile(r"/(?:[^/]+_)?slurmstepd\.scope/job_(?P<job>\d+)(?:/|$)")
CGROUP, ENVIRON = "cgroup", "environ"


class CgroupConflict(ValueError):
    """A /proc/PID/cgroup whose lines name different jobs."""


def job_of_cgroup(text: str) -> int | None:
    """The job whose Slurm cgroup holds the process (``/proc/PID/cgroup`` text, v1 or v2);
    None when it is in no Slurm job's cgroup. Raises CgroupConflict when lines disagree."""
    jobs = set()
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        m = _V1.search(parts[2]) or _V2.search(parts[2])
        if m:
            jobs.add(int(m.group("job")))
    if len(jobs) > 1:
        raise CgroupConflict(f"the process is in the cgroups of jobs {sorted(jobs)}")
    return jobs.pop() if jobs else None


def job_of_environ(data: bytes) -> int | None:
    """SLURM_JOB_ID of a ``/proc/PID/environ`` (NUL-separated), None when absent or not a number."""
    for item in data.split(b"\0"):
        if item.startswith(b"SLURM_JOB_ID="):
            value = item.split(b"=", 1)[1]
            return int(value) if value.isdigit() else None
    return None


def real_uid(status: str) -> int | None:
    """The real uid of a ``/proc/PID/status`` (its ``Uid:`` line)."""
    for line in status.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    return None


@dataclass(frozen=True)
class PidOwner:
    """The job a process belongs to (None: no job of this node), and how it was known."""

    job_id: int | None
    how: str  # CGROUP | ENVIRON | "none: <why>"


class PidJobs:
    """Maps pids to jobs by reading ``proc`` (``/proc`` on a node)."""

    def __init__(self, proc: str = "/proc"):
        self.proc = proc

    def _read(self, pid: int, name: str) -> bytes | None:
        try:
            with open(f"{self.proc}/{pid}/{name}", "rb") as fh:
                return fh.read(1 << 20)
        except OSError:
            return None

    def owner(self, pid: int, jobs: Mapping[int, int | None]) -> PidOwner:
        """The job of ``pid`` among ``jobs`` (job id -> its user's uid, None when unknown)."""
        cgroup = self._read(pid, "cgroup")
        if cgroup is not None:
            try:
                job = job_of_cgroup(cgroup.decode(errors="replace"))
            except CgroupConflict as exc:
                return PidOwner(None, f"none: {exc}")
            if job is not None:
                return PidOwner(job, CGROUP)
        environ = self._read(pid, "environ")
        job = job_of_environ(environ) if environ is not None else None
        if job is None:
            return PidOwner(None, "none: in no Slurm job's cgroup and no SLURM_JOB_ID readable")
        if job not in jobs:
            return PidOwner(None, f"none: its environment names job {job}, not a job of this node")
        status = self._read(pid, "status")
        uid = real_uid(status.decode(errors="replace")) if status is not None else None
        if jobs[job] is None or uid != jobs[job]:
            return PidOwner(None, f"none: its environment names job {job}, but it runs as uid {uid}, "
                                  f"not as the job's user ({jobs[job]})")
        return PidOwner(job, ENVIRON)
