"""The one writer of the history: a finished run, under its job's workload identity, as a
measurement or a lower bound.

Every fact about a run comes here (`RunFigures`: the node agent's final summary, brought by the
controller's epilog or by the sweep, and the monitor's own samples of a run it tracked) and is
written by one function, `HistoryRecorder.record` (an admin's `gpupack history record` too,
through `record_job`): the run is judged here (`packer.run_truth`) against what Slurm says of
the job (only a completed latest run without gaps in its samples is a measurement) and written
with `Store.record_run`, which merges what several sources saw of one run (job, fingerprint,
start) into one row and one event. No other module writes the `runs` table
(tests/unit/helper/test_finished_run_path.py).

The identity (fingerprint, user, name, the level that sized it) travels with the job: the
watcher notes it by job id the first time it sees the job (`note_identity`, `store.identities`:
from the `fp=`/`lvl=` the shim wrote into its AdminComment, or, for a job without one such as
in observe mode, from its user, name and batch script), and the end reads it there; only a job
the watcher never saw (it ran and ended while the helper was down) is identified at its end.
"""
from __future__ import annotations

import logging
import sqlite3
import time
from dataclasses import dataclass

from packer.comment import parse
from packer.fingerprint import fingerprint
from packer.need import need_bytes
from packer.run_truth import RunEnd, judge
from store.db import RunRecord, Store, UnmeasuredRun
from store.identities import JobIdentities, JobIdentity
from slurm_plugin.helper.level_guesses import note_keys, note_run
from slurm_plugin.slurm.errors import JobNotFoundError
from slurm_plugin.slurm.model import FINISHED_JOB_STATES, Job
from slurm_plugin.slurm.runner import SlurmRunner

log = logging.getLogger(__name__)
GIB = 1024**3
REQUEUED_STATES = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED")  # the run ended, the job waits again
#: an agent's start of a run may precede Slurm's start of it by this much (clocks, rounding)
START_SKEW_S = 5.0

# what `HistoryRecorder.record` did with a run
RECORDED, MERGED, UNMEASURED, NOT_FINISHED, UNATTRIBUTED = (
    "recorded", "merged", "unmeasured", "not-finished", "unattributed")
SETTLED = (RECORDED, MERGED, UNMEASURED)  # nothing more will come of it: the agent may drop it


@dataclass(frozen=True)
class RunFigures:
    """What one source saw of one run."""

    job_id: int
    node: str
    started_at: float  # the agent's start of the run: the run's key (0: unknown)
    peak_mem_bytes: int
    mean_util_pct: float | None = None
    throughput: float | None = None
    gaps_s: float | None = 0.0  # seconds without samples (None: the source cannot tell)
    ended_at: float = 0.0  # when the run ended, as this source knows it (0: not known, now)
    alloc_peak_bytes: int | None = None  # the job's allocator's peak of allocated bytes (None: not said)
    covered: bool = False  # its GPU was sampled from the run's start to its end

    @classmethod
    def from_summary(cls, summary: dict) -> RunFigures:
        """From a node agent's final summary (`slurm_plugin.agent.finals.job_summary`); a
        summary without `gaps` (an older agent) cannot vouch for its run."""
        gaps = summary.get("gaps")
        return cls(
            job_id=int(summary["job_id"]), node=str(summary.get("node") or ""),
            started_at=float(summary.get("started_at") or 0.0),
            peak_mem_bytes=int(summary.get("peak_mem_bytes") or 0), mean_util_pct=summary.get("mean_util_pct"),
            throughput=summary.get("mean_throughput"), gaps_s=None if gaps is None else float(gaps),
            ended_at=float(summary.get("ended_at") or 0.0),
            alloc_peak_bytes=_int_or_none(summary.get("alloc_peak_bytes")), covered=summary.get("covered") is True,
        )


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def job_identity(runner: SlurmRunner, job_id: int, job: Job | None = None) -> JobIdentity:
    """A job's identity, worked out from what Slurm says of it now: the `fp=` (and `lvl=`) the
    submit path wrote in its AdminComment, else its batch script (`packer.fingerprint`)."""
    job = job or runner.job(job_id)
    user, name = job.user or "", job.name or ""
    record = parse(job.admin_comment)
    if record is not None and record.fingerprint:
        return JobIdentity(job_id, record.fingerprint, user, name, str(record.fields.get("lvl") or ""))
    script = runner.batch_script(job_id)
    return JobIdentity(job_id, fingerprint(user, name, script.encode("utf-8", "surrogateescape")), user, name)


def note_identity(store: Store, runner: SlurmRunner, job: Job) -> JobIdentity:
    """The identity of ``job``: the one kept by job id, else worked out now (`job_identity`)
    and kept, so every later run of the job (a requeue) is recorded under it."""
    identities = JobIdentities(store)
    known = identities.of(job.job_id)
    if known is not None:
        return known
    identity = job_identity(runner, job.job_id, job)
    if not identities.note(identity):  # another thread noted it first: its identity stands
        return identities.of(job.job_id) or identity
    try:  # its looser levels' keys too, from its script read now: the end reads them in the store
        note_keys(store, runner, job, identity.fingerprint, identity.user)
    except sqlite3.Error as exc:  # a refinement: the end works them out if they are missing
        log.info("job %d: its levels' keys were not kept now: %s", job.job_id, exc)
    return identity


def run_end(job: Job, started_at: float, ended_by: str = "") -> RunEnd | None:
    """How the run that began at `started_at` (agent's clock) ended, from Slurm's view of its
    job now; None while it has not ended (the job still runs that run)."""
    begun = job.start_time.timestamp() if job.start_time is not None else None
    latest = not (started_at and begun is not None and started_at < begun - START_SKEW_S)
    state = job.base_state or job.state or "GONE"
    # a job still COMPLETING has ended when Slurm shows its base state (23.11+); 22.05 shows
    # only COMPLETING then, and its end is known once it is COMPLETED
    if latest and state not in FINISHED_JOB_STATES and state not in REQUEUED_STATES and not ended_by:
        return None
    return RunEnd(state=state, latest_run=latest, ended_by=ended_by)


class HistoryRecorder:
    """Judges and records runs into one store; `source` names the path in each row."""

    def __init__(self, store: Store, runner: SlurmRunner, source: str):
        self.store = store
        self.runner = runner
        self.source = source

    def record(self, figures: RunFigures, job: Job | None = None, fp: tuple[str, str, str] | None = None,
               end: RunEnd | None = None, source: str | None = None) -> str:
        """Record one run; returns what was done (RECORDED, MERGED, ...). `job` is Slurm's
        view of the job (looked up when None), `fp` its (fingerprint, user, name), `end`
        how the run ended (from `job` when None; its `gaps_s` is taken from `figures`),
        `source` the path that brought it (default: the recorder's)."""
        if figures.peak_mem_bytes < 0 or (figures.peak_mem_bytes == 0 and not figures.covered):
            log.debug("job %d: no GPU memory measured: not history", figures.job_id)
            return UNMEASURED
        identity = self._known_identity(figures, fp)
        try:
            job = job or self.runner.job(figures.job_id)
            if identity is None:  # the watcher never saw the job: identified at its end, kept for its next run
                identity = note_identity(self.store, self.runner, job)
                log.info("job %d: identified at its end (the watcher never saw it run)", figures.job_id)
        except JobNotFoundError:
            if identity is None:
                log.warning("job %d is gone from Slurm: its run (peak %.2f GiB) cannot be attributed to a "
                            "workload", figures.job_id, figures.peak_mem_bytes / GIB)
                return UNATTRIBUTED
            end = end or RunEnd("GONE")  # how it ended is not known: at most a lower bound
        end = end or run_end(job, figures.started_at)
        if end is None:
            return NOT_FINISHED
        verdict = judge(RunEnd(end.state, figures.gaps_s, end.latest_run, end.ended_by))
        untouched = figures.peak_mem_bytes == 0
        if untouched and verdict.lower_bound:  # a run cut short before it used its GPU says nothing
            log.debug("job %d: no GPU memory measured (%s): not history", figures.job_id, verdict.why)
            return UNMEASURED
        util = 0.0 if untouched else figures.mean_util_pct
        util = None if util is None else min(100.0, max(0.0, float(util)))
        need = need_bytes(figures.peak_mem_bytes, figures.alloc_peak_bytes)
        run = RunRecord(
            job_id=figures.job_id, fingerprint=identity.fingerprint, peak_mem_bytes=int(figures.peak_mem_bytes),
            mean_util_pct=util, throughput=figures.throughput, user=identity.user, name=identity.name,
            ended_at=figures.ended_at or time.time(),
            source=source or self.source, started_at=figures.started_at, lower_bound=verdict.lower_bound,
            end_state="completed untouched" if untouched else verdict.why, need_bytes=need, untouched=untouched,
        )
        kind = "lower bound" if verdict.lower_bound else "untouched GPU: peak" if untouched else "peak"
        if need is not None:
            kind += f" (need {need / GIB:.2f}GiB from its allocator) NVML"
        detail = (f"recorded {kind} {run.peak_mem_bytes / GIB:.2f}GiB ({verdict.why}) util "
                  f"{util if util is None else round(util)}% throughput "
                  f"{run.throughput if run.throughput is None else round(run.throughput, 2)}/s")
        data = {"fingerprint": identity.fingerprint, "peak_mem_bytes": run.peak_mem_bytes, "mean_util_pct": util,
                "throughput": run.throughput, "lower_bound": verdict.lower_bound, "why": verdict.why,
                "source": source or self.source, "node": figures.node, "need_bytes": need, "untouched": untouched}
        try:
            new = write_run(self.store, run, ("history", detail, data))
        except UnmeasuredRun:
            return UNMEASURED
        try:  # the looser levels' keys, and a right guess of the level that sized it
            note_run(self.store, self.runner, job, identity.fingerprint, identity.user,
                     measured=not verdict.lower_bound, new=new, level=identity.level)
        except Exception:  # a refinement of the history: the run itself is recorded
            log.exception("job %d: the levels of its workload were not noted", figures.job_id)
        log.info("job %d: %s %s", figures.job_id, detail, "" if new else "(merged into the run recorded already)")
        return RECORDED if new else MERGED

    def _known_identity(self, figures: RunFigures, fp: tuple[str, str, str] | None) -> JobIdentity | None:
        """The run's identity without asking Slurm: the one its source gives (the monitor's
        track), else the one kept by job id (`note_identity`), else that of a row another
        source wrote of the same run."""
        kept = JobIdentities(self.store).of(figures.job_id)
        if fp is not None:
            return JobIdentity(figures.job_id, fp[0], fp[1], fp[2], kept.level if kept is not None else None)
        if kept is not None:
            return kept
        known = self.store.run_of(figures.job_id, figures.started_at) if figures.started_at else None
        if known is None:
            return None
        return JobIdentity(figures.job_id, known.fingerprint, known.user, known.name, None)


def write_run(store: Store, run: RunRecord, event: tuple[str, str, dict]) -> bool:
    """The one write of a history row (`Store.record_run`: a run seen by several sources merges
    into one row, its event logged once); True when the run is new."""
    return store.record_run(run, event)


def record_job(store: Store, runner: SlurmRunner, job_id: int, peak_mem_bytes: int, mean_util_pct: float | None,
               throughput: float | None = None, source: str = "manual", started_at: float = 0.0) -> RunRecord:
    """Record a run an admin measured (`gpupack history record`): a measurement, whatever
    Slurm says of the job. Raises `UnmeasuredRun` for a run with no GPU memory measured."""
    if peak_mem_bytes <= 0:
        raise UnmeasuredRun(f"job {job_id}: no GPU memory measured; a run without a peak is not history")
    identity = note_identity(store, runner, runner.job(job_id))
    fp, user, name = identity.fingerprint, identity.user, identity.name
    run = RunRecord(
        job_id=job_id, fingerprint=fp, peak_mem_bytes=int(peak_mem_bytes), mean_util_pct=mean_util_pct,
        throughput=throughput, user=user, name=name, ended_at=time.time(), source=source, started_at=started_at,
        end_state="recorded by hand",
    )
    write_run(store, run, ("history", f"recorded peak {peak_mem_bytes / GIB:.2f}GiB util {mean_util_pct} by hand",
                           {"fingerprint": fp}))
    return run
