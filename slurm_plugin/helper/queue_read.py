"""How the watcher reads the queue each round without loading slurmctld (issue 36).

Every `REQUEST_JOB_INFO` makes slurmctld pack every job it knows under its job read lock,
whatever the client filters afterwards, and `squeue --json` then costs the client seconds on a
long queue. So a round reads:

1. on releases with `squeue --only-job-state` (23.11+: 24.11, 26.05), first every job's state
   from slurmctld's job-state cache (`REQUEST_JOB_STATE`: no job lock, no records packed); while
   the watcher did not change a job since the last full read and that read is younger than
   `[monitor] queue_refresh_s`: when no job changed state, the last listing stands
   (``kind="unchanged"``); when some did (a job came, started, ended or went), only those are
   read, by id, and merged into the last listing (``kind="changes"``; a full read instead when
   more than a tenth of the queue changed). A field that changes without the state (a priority,
   a reason, an admin's update) is seen at the next full read, at most `queue_refresh_s` later;
2. else the jobs not finished yet as formatted text (`squeue -h -O`, `slurm.formatted`), plus
   the jobs the watcher follows that have left that list (by id, formatted, whatever their
   state); 22.05 takes this path every round: its CLI has no cheaper one (its libslurm's
   `slurm_load_jobs(update_time)` answers "no change", but only `squeue --iterate` uses it);
3. what the formatted text cannot carry (`gres_detail`, the GPUs a running job holds; and on
   22.05-23.11 the excluded nodes, which their `-O` lacks) from the JSON of only the jobs that
   need it and whose record the reader does not hold yet: running jobs that asked for GPUs or
   shards (kept while the same run lasts), and pending packed (shard) jobs, the ones the
   watches steer (22.05-23.11, kept while their AdminComment and restart count stay; a user's
   own `scontrol update ExcNodeList` of such a job is then seen at the next reconciliation). 23.11+ asks
   for those jobs by id; 22.05, whose `--json` ignores filters, reads a running job's by id as
   text (`scontrol -d show job ID`, at most 20 a round: `detail_by_id`) and lists them all as
   JSON, at most once per `queue_refresh_s`, only for the pending packed jobs and the records
   the text read refused;
4. every `[monitor] queue_reconcile_s`, the whole queue as JSON (`kind="json"`), as before:
   every field, every cached record refreshed.

After a whole JSON listing (steps 3 on 22.05 and 4), the freed memory of its text and parsed
tree is handed back to the system (`give_back_freed_memory`): at 50,000 jobs on 22.05 that text
is about 130 MB and its tree twice that, and glibc keeps most of it resident otherwise (measured:
348 MiB resident after the parse, 212 MiB after the trim, the 50,000 records still held).

A whole JSON listing that fails (on 22.05 at 24,000 queued jobs, under load, `squeue --json`
ran past the watcher's 10 s command timeout, so every round failed and none was made) does not
cost the round: the round reads formatted, said once per failure, and the next whole listing is
tried a `queue_reconcile_s` later. 22.05's listing for details is tried again a
`queue_refresh_s` later, and twice as long after each failure in a row, up to
`queue_reconcile_s` (on a queue too long for it to finish in time, every try costs the round
the whole timeout: at 50,000 jobs that was 10 s of each round); the jobs wait for their detail
meanwhile, as they do between two such listings.

`QueueRead.taken_at` is when the listing was asked for (for an unchanged one: when the state
read confirmed it), so the view's age holds however the listing was made.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from slurm_plugin.helper.detail_by_id import DetailsById
from slurm_plugin.slurm.formatted import carries_excluded, with_detail
from slurm_plugin.slurm.model import Job
from slurm_plugin.slurm.errors import SlurmCommandError

log = logging.getLogger(__name__)

ACTIVE = ("RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "STOPPED", "RESIZING")
MERGE_AT_MOST = 500  # jobs read by id and merged (or a tenth of the queue, if more); else a full read


@dataclass(frozen=True)
class QueueRead:
    """One round's listing and what it cost."""

    jobs: list[Job]
    taken_at: float  # when Slurm was asked (wall clock)
    kind: str  # "json" (the whole queue), "formatted", "unchanged" (the state read saw no change),
    #            "changes" (the jobs whose state changed, read by id, merged into the last listing)
    query_s: float  # seconds spent in Slurm's commands for it
    commands: int  # Slurm commands run for it
    skipped: int = 0  # records refused (hostile or unreadable text), counted and left out
    detail_jobs: int = 0  # jobs whose JSON detail was read this time


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, loaded once (None where the C library has none)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def give_back_freed_memory() -> bool:
    """Collect cycles and ask glibc to return its free heap pages to the system
    (`malloc_trim(0)`); False where the C library has no such call (not glibc)."""
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def _wants_gpus(job: Job) -> bool:
    return any(item.name in ("gpu", "shard") for item in job.gres)


def _detail_key(job: Job, excluded: bool) -> tuple | None:
    """What keeps a job's JSON detail valid (None: the job needs none): a running GPU job's run
    (its GPUs stay while it runs); a pending job with the suite's record, where the listing
    lacks the excluded nodes: a pending packed job (shards), the one the watches steer (its
    excluded nodes change with the suite's record or a requeue)."""
    if job.state in ACTIVE and _wants_gpus(job):
        return ("run", job.start_time, job.nodes, job.restart_cnt)
    if not excluded and job.state == "PENDING" and any(item.name == "shard" for item in job.gres):
        return ("pending", job.admin_comment, job.restart_cnt)
    return None


class QueueReader:
    """Reads the queue for the watcher (`read`); `runner`: a `SlurmRunner` (a runner without
    `formatted_jobs`, e.g. a test's fake, is read with `jobs_in_play` every round)."""

    def __init__(self, runner_of: Callable[[], object], *, reconcile_s: float = 300.0, refresh_s: float = 10.0,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic):
        self._runner_of = runner_of
        self.reconcile_s = reconcile_s
        self.refresh_s = refresh_s
        self.clock = clock
        self.monotonic = monotonic
        self._details: dict[int, tuple[tuple, Job]] = {}  # job -> (key, its JSON record)
        # job -> (its formatted record, its detail, the two joined): a record the listing gave again
        # (`formatted.RecordMemo`) with the same detail is not joined again
        self._joined: dict[int, tuple[Job, Job, Job]] = {}
        self._last: QueueRead | None = None
        self._last_full = float("-inf")  # monotonic time of the last formatted or JSON read
        self._last_json = float("-inf")
        self._last_detail_all = float("-inf")  # 22.05: the last whole JSON listing for details
        self._detail_wait = refresh_s  # 22.05: before the next one (doubled after each failure)
        self._states: dict[int, str] | None = None  # the state read the last listing matches
        self._changes = -1  # the runner's change count at the last full read
        self._full_skipped = 0  # records the last full read refused (still left out of merged listings)
        self._listed: set[int] = set()  # the last listing's jobs
        self._finished: set[int] = set()  # of them, those finished (listed while followed)
        self.trim: Callable[[], object] = give_back_freed_memory  # after each whole JSON listing
        self.by_id = DetailsById()  # 22.05: running jobs' detail, one `scontrol -d show job` each

    def read(self, also: Iterable[int] = ()) -> QueueRead:
        """The jobs not finished yet, and those of ``also`` whatever their state."""
        runner = self._runner_of()
        also = set(also)
        started, query_before = self.monotonic(), getattr(runner, "query_s", 0.0)
        taken_at = self.clock()
        if not hasattr(runner, "formatted_jobs"):
            return self._json(runner, also, taken_at, started, query_before)
        now = self.monotonic()
        if now - self._last_json >= self.reconcile_s:
            try:
                return self._json(runner, also, taken_at, started, query_before)
            except SlurmCommandError as exc:
                self._last_json = now  # tried again a queue_reconcile_s later
                log.warning("the whole JSON listing failed (%s); this round reads the queue formatted, the "
                            "next whole listing in %.0f s", exc, self.reconcile_s)
        commands = 0
        version = runner.version()
        states = None
        if version.has_job_state_query:
            states = runner.job_states()
            commands += 1
            if (self._last is not None and self._states is not None and getattr(runner, "changes", 0) == self._changes
                    and now - self._last_full < self.refresh_s):
                listed = self._listed
                if states == self._states and also <= listed and self._finished <= also:
                    return self._done(QueueRead(self._last.jobs, taken_at, "unchanged", 0.0, commands),
                                      runner, started, query_before, full=False)
                wanted = self._changed(states, also, listed)
                if wanted is not None:
                    read = self._merged(runner, wanted, states, also, taken_at, commands)
                    return self._done(read, runner, started, query_before, full=False)
        listing = runner.formatted_jobs()
        commands += 1
        jobs, skipped = list(listing.jobs), len(listing.skipped)
        missing = also - {j.job_id for j in jobs}
        if missing:
            extra = runner.formatted_jobs(missing)
            commands += 1
            jobs += [j for j in extra.jobs if j.job_id in missing]
            skipped += len(extra.skipped)
        jobs, fetched, detail_commands = self._with_details(runner, jobs, carries_excluded(version))
        read = QueueRead(jobs, taken_at, "formatted", 0.0, commands + detail_commands, skipped, fetched)
        self._states, self._full_skipped = states, skipped
        return self._done(read, runner, started, query_before, full=True)

    def _changed(self, states: dict[int, str], also: set[int], listed: set[int]) -> set[int] | None:
        """The jobs to read by id: those whose state changed since the last listing's state read,
        those gone from slurmctld, and followed jobs not listed; None when they are too many
        to merge (a full read is cheaper)."""
        before = self._states or {}
        wanted = {j for j, state in states.items() if before.get(j) != state}
        wanted |= before.keys() - states.keys()
        wanted |= also - listed
        if len(wanted) > max(MERGE_AT_MOST, len(states) // 10):
            return None
        return wanted

    def _merged(self, runner, wanted: set[int], states: dict[int, str], also: set[int], taken_at: float,
                commands: int) -> QueueRead:
        """The last listing with ``wanted`` read again by id: as a full read would list them (the
        jobs not finished yet, and the followed ones in whatever state)."""
        assert self._last is not None
        fresh = runner.formatted_jobs(wanted) if wanted else None
        commands += 1 if wanted else 0
        kept = [j for j in self._last.jobs if j.job_id not in wanted and (not j.is_finished or j.job_id in also)]
        added = sorted((j for j in (fresh.jobs if fresh else ()) if j.job_id in wanted
                        and (not j.is_finished or j.job_id in also)), key=lambda j: j.job_id)
        jobs, fetched, detail_commands = self._with_details(runner, kept + added, carries_excluded(runner.version()))
        self._states = states
        skipped = self._full_skipped + (len(fresh.skipped) if fresh else 0)
        return QueueRead(jobs, taken_at, "changes", 0.0, commands + detail_commands, skipped, fetched)

    def _json(self, runner, also: set[int], taken_at: float, started: float, query_before: float) -> QueueRead:
        jobs = list(runner.jobs_in_play(also=also))
        self._details = {}
        excluded = False
        for job in jobs:
            key = _detail_key(job, excluded)
            if key is not None:
                self._details[job.job_id] = (key, job)
        self._last_json = self._last_detail_all = self.monotonic()
        self._detail_wait = self.refresh_s
        self._states = None  # the next round reads formatted
        self.trim()
        return self._done(QueueRead(jobs, taken_at, "json", 0.0, 1), runner, started, query_before, full=True)

    def _with_details(self, runner, jobs: list[Job], excluded: bool) -> tuple[list[Job], int, int]:
        """``jobs`` with their JSON detail where they need it; (jobs, details read, commands)."""
        keys = {j.job_id: _detail_key(j, excluded) for j in jobs}
        self._details = {i: d for i, d in self._details.items() if keys.get(i) is not None}
        need = [i for i, k in keys.items() if k is not None and self._details.get(i, (None,))[0] != k]
        commands = read_by_id = 0
        whole = bool(need) and not runner.version().filters_json
        if whole and callable(getattr(runner, "run", None)):  # 22.05: running jobs one by one (`detail_by_id`)
            by_id, commands = self.by_id.read(runner, {j.job_id: j for j in jobs}, need, keys)
            for job_id, detail in by_id.items():
                self._details[job_id] = (keys[job_id], detail)
            read_by_id = len(by_id)
            # left for the whole listing: pending jobs (their excluded nodes) and refused records; the
            # other running jobs are read by id in the next rounds
            need = [i for i in need if i not in by_id and (keys[i][0] == "pending" or i in self.by_id.refused)]
        listed = False
        if need:
            if not whole or self.monotonic() - self._last_detail_all >= self._detail_wait:
                wanted = set(need)  # 22.05 lists every job: only those are kept
                commands += 1
                listed = True
                try:
                    fetched = {j.job_id: j for j in runner.jobs_json(need) if j.job_id in wanted}
                    self._detail_wait = self.refresh_s
                except SlurmCommandError as exc:
                    if not whole:
                        raise
                    fetched = {}
                    self._detail_wait = min(2 * self._detail_wait, max(self.reconcile_s, self.refresh_s))
                    log.warning("the whole JSON listing for %d jobs' detail failed (%s); they wait for it, "
                                "tried again in %.0f s", len(need), exc, self._detail_wait)
                if whole:
                    self._last_detail_all = self.monotonic()
                    self.trim()
                for job_id in need:
                    if job_id in fetched:
                        self._details[job_id] = (keys[job_id], fetched[job_id])
            else:
                log.debug("%d jobs wait for their JSON detail (22.05: one whole listing per %.0f s)",
                          len(need), self.refresh_s)
        out = []
        joined: dict[int, tuple[Job, Job, Job]] = {}
        for j in jobs:
            kept = self._details.get(j.job_id) if keys[j.job_id] is not None else None
            detail = kept[1] if kept is not None and kept[0] == keys[j.job_id] else None
            if detail is None:
                out.append(j)
                continue
            last = self._joined.get(j.job_id)
            if last is not None and last[0] is j and last[1] is detail:
                both = last[2]  # the same record and the same detail as last round: the same join
            else:
                both = with_detail(j, detail, excluded=not excluded)
            joined[j.job_id] = (j, detail, both)
            out.append(both)
        self._joined = joined
        return out, read_by_id + (len(need) if listed else 0), commands

    def _done(self, read: QueueRead, runner, started: float, query_before: float, *, full: bool) -> QueueRead:
        query_s = getattr(runner, "query_s", None)
        spent = (query_s - query_before) if query_s is not None else self.monotonic() - started
        read = QueueRead(read.jobs, read.taken_at, read.kind, spent, read.commands, read.skipped, read.detail_jobs)
        if full:
            self._last_full = self.monotonic()
            self._changes = getattr(runner, "changes", 0)
        states_read = hasattr(runner, "formatted_jobs") and runner.version().has_job_state_query
        if read.kind != "unchanged" and states_read:  # what the next state read is checked against
            self._listed = {j.job_id for j in read.jobs}
            self._finished = {j.job_id for j in read.jobs if j.is_finished}
        self._last = read
        return read
