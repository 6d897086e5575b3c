"""A node agent's desk for packed jobs' out-of-memory ends: the SPANK plugin's task exits, the
job's own word that an allocation failed, and the helper's answer (``oom_ends.OomEnds`` keeps
the ends themselves; ``packer.oom_restart`` judges them on the controller).

Where a job writes its output comes from Slurm's record, which the helper pushes with the node's
job list once a round. A job that ends within a round of starting may have no list giving its
paths yet (none named it, or one named it while its record had none): its nonzero end, when
nothing else makes it an out-of-memory end (no report, not measured at the share's limit) and
that the task exited itself or aborted (not killed: a cancel or a time limit never waits),
**waits for Slurm's record**: the plugin is answered "hold" until a list gives the paths, a list
taken since the step's end names the job without them (the job is still RUNNING in Slurm while
its end is held, so the helper's next round lists it), or the hold's time passes
(`oom_ends.hold_limit`: 20 s, longer where the helper's cycle is, counted from the step's end).
The list that brings its paths has its output read at once, before the helper's same round asks
for the node's ends (`outputs_arrived`), so the end costs one round, as for a job listed before.
"""
from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from mig.backend import GpuBackend
from mig.errors import MigError
from packer.oom_texts import OomText, find_oom
from slurm_plugin.agent.oom_ends import KEEP_S, OomEnds
from slurm_plugin.agent.output_tail import read_tails
from slurm_plugin.agent.paths import AgentError
from slurm_plugin.agent.sampler import Sampler
from slurm_plugin.agent.state import Assignment
from slurm_plugin.agent.trust import Peer, ReportRejected, check_reporter

log = logging.getLogger(__name__)

#: the plugin's exit code of a task that aborted (128 + SIGABRT: an uncaught C++ exception, a
#: framework's fatal check); with the codes a process exits with itself (1-127), the ends whose
#: output may name an out-of-memory failure
ABORTED = 128 + signal.SIGABRT


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


@dataclass(frozen=True)
class AwaitedEnd:
    """A packed job's nonzero end waiting for the list that says where its output is."""

    step_id: int
    exit_code: int
    started_at: float | None  # the run it belongs to (a requeued job's next run is another)
    at: float  # when the step ended (the agent's clock)
    lists_at: int | None = None  # how many lists the agent had taken then (None: its lister does not count)


class OomDesk:
    def __init__(self, agent: DeskAgent):
        self.agent = agent
        self.awaited: dict[int, AwaitedEnd] = {}  # job -> its end waiting for Slurm's record of its output

    def task_exit(self, job_id: int, step_id: int, exit_code: int) -> str:
        """A task of a step exited: "hold" while its out-of-memory end waits for the helper.

        A packed job's nonzero end that has no OOM end yet has its output's tail read first
        (outside the agent's lock: a slow file system stalls this call only) for a framework's
        out-of-memory text: the job's word, which `oom_ends` weighs as such. Where no list has
        named the job yet, the end waits for one (the module's doc)."""
        ends = self.agent.oom_ends
        with self.agent.lock:
            a = self.agent.jobs.get(job_id)
            if a is None:
                return "done"
            limit = self.memory_limit(a)
            look = ends.may_be_oom(a, exit_code, limit) and not ends.has_end(a)
        outputs = getattr(self.agent.list_running_jobs, "output_of", None)
        read_paths = outputs is not None and outputs(job_id) is not None  # known when the tail was read
        said = self.said_in_output(a) if look else None
        with self.agent.lock:
            a = self.agent.jobs.get(job_id)
            if a is None:
                return "done"
            now = self.agent.clock()
            if exit_code and a.device_uuid:
                self.agent.sampler.sample(a, now)  # what it held at the end, from the GPU
            if look and said is None and limit and self._awaits_record(a, step_id, exit_code, limit, now, read_paths):
                return "hold"
            awaited = self.awaited.pop(job_id, None)
            ended_at = awaited.at if awaited is not None and awaited.started_at == a.started_at else None
            return ends.task_exit(a, step_id, exit_code, limit, said, ended_at=ended_at)

    def _awaits_record(self, a: Assignment, step_id: int, exit_code: int, limit: int, now: float,
                       read_paths: bool = True) -> bool:
        """Whether this end waits for a job list naming the job (under the agent's lock).
        ``read_paths``: whether its paths were known when its output was read (a list that came
        between that read and this lock brought them: the next ask reads the output, the end is
        not judged without it, as it once was on 26.05 in CI)."""
        for job_id in [j for j, w in self.awaited.items() if now - w.at > KEEP_S]:
            del self.awaited[job_id]
        if not (0 < exit_code < 128 or exit_code == ABORTED):
            return False  # killed (a cancel, a time limit: 128 + SIGTERM/SIGKILL): no framework's end
        lister = self.agent.list_running_jobs
        output_of = getattr(lister, "output_of", None)
        if output_of is None or not callable(lister):
            return False  # no pushed lists here
        if output_of(a.job_id) is not None:
            return not read_paths  # its output was read with its paths; else read it at the next ask
        if self.agent.oom_ends.end_without_words(a, exit_code, limit):
            return False
        lists = getattr(lister, "lists", None)
        lists = lists if isinstance(lists, int) else None
        waiting = self.awaited.get(a.job_id)
        if waiting is None or waiting.started_at != a.started_at:
            waiting = self.awaited[a.job_id] = AwaitedEnd(step_id, exit_code, a.started_at, now, lists)
            log.info("job %d step %d ended (exit %d) before a job list said where its output is: its end waits "
                     "up to %.0fs for Slurm's record", a.job_id, step_id, exit_code, self.agent.oom_ends.hold_s)
        listed = lister()
        # a list that named it without paths may have been made before its record had them (a job
        # listed while starting): a list taken since the step's end decides, where lists are counted
        came_since = waiting.lists_at is None or lists is None or lists > waiting.lists_at
        if listed is not None and a.job_id in listed and came_since:
            log.info("job %d: the job list names it without where its output is (Slurm's record does not tell): "
                     "its end is judged without its output", a.job_id)
            return False
        if now - waiting.at >= self.agent.oom_ends.hold_s:
            log.warning("job %d: no job list named it within %.0fs of its step's end: judged without its output",
                        a.job_id, self.agent.oom_ends.hold_s)
            return False
        return True

    def outputs_arrived(self) -> int:
        """A job list was taken: each end waiting for it whose paths it brought is judged now
        (its output read outside the agent's lock), so the helper's round that pushed the list
        finds the OOM end when it asks for the node's ends. Returns how many were judged."""
        output_of = getattr(self.agent.list_running_jobs, "output_of", None)
        if output_of is None:
            return 0
        with self.agent.lock:
            ready = [(j, w) for j, w in self.awaited.items() if output_of(j) is not None]
        judged = 0
        for job_id, waiting in ready:
            answer = self.task_exit(job_id, waiting.step_id, waiting.exit_code)
            judged += 1
            log.info("job %d: its output's record came with the job list; its end: %s", job_id, answer)
        return judged

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
