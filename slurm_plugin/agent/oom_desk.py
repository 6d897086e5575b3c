"""A node agent's desk for packed jobs' out-of-memory ends: the SPANK plugin's task exits, the
job's own word that an allocation failed, and the helper's answer (``oom_ends.OomEnds`` keeps
the ends themselves; ``packer.oom_restart`` judges them on the controller)."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from mig.backend import GpuBackend
from mig.errors import MigError
from packer.oom_texts import OomText, find_oom
from slurm_plugin.agent.oom_ends import OomEnds
from slurm_plugin.agent.output_tail import read_tails
from slurm_plugin.agent.paths import AgentError
from slurm_plugin.agent.sampler import Sampler
from slurm_plugin.agent.state import Assignment
from slurm_plugin.agent.trust import Peer, ReportRejected, check_reporter

log = logging.getLogger(__name__)


class DeskAgent(Protocol):
    """What the desk reads of its node agent (``slurm_plugin.agent.daemon.NodeAgent``)."""

    node: str
    backend: GpuBackend
    clock: Callable[[], float]
    lock: threading.RLock
    jobs: dict[int, Assignment]
    sampler: Sampler
    oom_ends: OomEnds
    list_running_jobs: object  # a slurm_jobs.PushedJobs (``output_of``), or another lister


class OomDesk:
    def __init__(self, agent: DeskAgent):
        self.agent = agent

    def task_exit(self, job_id: int, step_id: int, exit_code: int) -> str:
        """A task of a step exited: "hold" while its out-of-memory end waits for the helper.

        A packed job's nonzero end that has no OOM end yet has its output's tail read first
        (outside the agent's lock: a slow file system stalls this call only) for a framework's
        out-of-memory text: the job's word, which `oom_ends` weighs as such."""
        ends = self.agent.oom_ends
        with self.agent.lock:
            a = self.agent.jobs.get(job_id)
            if a is None:
                return "done"
            limit = self.memory_limit(a)
            look = ends.may_be_oom(a, exit_code, limit) and not ends.has_end(a)
        said = self.said_in_output(a) if look else None
        with self.agent.lock:
            a = self.agent.jobs.get(job_id)
            if a is None:
                return "done"
            if exit_code and a.device_uuid:
                self.agent.sampler.sample(a, self.agent.clock())  # what it held at the end, from the GPU
            return ends.task_exit(a, step_id, exit_code, limit, said)

    def said_in_output(self, a: Assignment) -> OomText | None:
        """A framework's out-of-memory text at the end of the job's output (Slurm's StdErr and
        StdOut paths, read as its user could: `output_tail`), or None."""
        outputs = getattr(self.agent.list_running_jobs, "output_of", None)
        where = outputs(a.job_id) if outputs is not None else None
        if where is None:
            return None
        if a.uid is not None and a.uid != where.uid:
            log.warning("job %d: Slurm says its user is uid %d, its steps ran as uid %d: its output is not read",
                        a.job_id, where.uid, a.uid)
            return None
        for tail in read_tails(where.paths, where.uid):
            found = find_oom(tail.text)
            if found is None:
                continue
            total = 1024**2 * max((g.memory_mib for g in self.agent.backend.list_gpus()), default=0)
            if found.requested_bytes is not None and found.requested_bytes > total:
                log.warning("job %d: its output names an allocation of %d bytes, more than a whole GPU here (%d): "
                            "not one a bigger share would hold", a.job_id, found.requested_bytes, total)
                return None
            log.info("job %d: its output names an out-of-memory failure (%s, %s): %s", a.job_id, found.framework,
                     found.text_id, found.line[:200])
            return found
        return None

    def memory_limit(self, a: Assignment) -> int | None:
        """Bytes the job's share lets it hold: its MPS limit, else its MIG slice's memory."""
        if a.mem_limit_bytes:
            return a.mem_limit_bytes
        if a.kind == "mig" and a.profile:
            try:
                return self.agent.backend.catalog(a.gpu_index).profile(a.profile).memory_mib * 1024**2
            except (AgentError, KeyError, ValueError, MigError) as exc:
                log.warning("job %d: no memory size for MIG %s: %s", a.job_id, a.profile, exc)
        return None

    def alloc_failed(self, job_id: int, peer: Peer, body: dict) -> dict:
        """A job says an allocation failed (its token and pid checked): the size it asked for
        is bounded by the GPU's memory; what it held is read from the GPU, not from it."""
        with self.agent.lock:
            a = self.agent.jobs.get(job_id)
            if a is None:
                raise ReportRejected(f"job {job_id} is not isolated on {self.agent.node}")
            check_reporter(job_id, str(body.get("token", "")), a.token, peer)
            asked = body.get("asked_bytes")
            total = 1024**2 * max((g.memory_mib for g in self.agent.backend.list_gpus()), default=0)
            if isinstance(asked, bool) or not isinstance(asked, int) or not 0 < asked <= max(total, 1):
                raise ReportRejected(f"asked_bytes must be an integer in (0, {total}], got {asked!r}")
            sample = self.agent.sampler.sample(a, self.agent.clock()) if a.device_uuid else None
            held = sample.mem_bytes if sample is not None else a.last_mem_bytes
            self.agent.oom_ends.alloc_failed(job_id, asked, held)
            return {"status": "ok"}

    def settle(self, job_id: int, outcome: str) -> bool:
        with self.agent.lock:
            return self.agent.oom_ends.settle(job_id, outcome)
