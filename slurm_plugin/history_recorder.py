"""Record a finished run under its job's fingerprint, as a measurement or a lower bound.

Only the controller helper writes the history (the monitor, the sweep of the agents' final
summaries, and the collector the controller's epilog wakes): each hands this module what
it saw of one run (`RunFigures`), and the run is judged here (`packer.run_truth`) against
what Slurm says of the job: only a completed latest run without gaps in its samples is a
measurement. Every path may see the same run: the store merges them into one row, with
one event (`Store.record_run`).

The fingerprint is the one the submit path wrote into the job's AdminComment (`fp=`); for a
job that has none (observe mode, or submitted before the suite was installed) it is
computed again from the job's user, name and batch script.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from packer.comment import parse
from packer.fingerprint import fingerprint
from packer.need import need_bytes
from packer.run_truth import RunEnd, judge
from store.db import RunRecord, Store, UnmeasuredRun
from slurm_plugin.helper.level_guesses import note_run
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


def job_fingerprint(runner: SlurmRunner, job_id: int, job: Job | None = None) -> tuple[str, str, str]:
    """(fingerprint, user, name) of a job Slurm still knows: the one the submit path wrote in
    its record (`fp=`), else worked out from its batch script (`packer.fingerprint`). The
    monitor's tracks and the history both ask here."""
    job = job or runner.job(job_id)
    record = parse(job.admin_comment)
    if record is not None and record.fingerprint:
        return record.fingerprint, job.user or "", job.name or ""
    script = runner.batch_script(job_id)
    return fingerprint(job.user or "", job.name or "", script.encode("utf-8", "surrogateescape")), job.user or "", job.name or ""


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
        known = self.store.run_of(figures.job_id, figures.started_at) if fp is None and figures.started_at else None
        if known is not None:  # recorded already by another path: its workload, without asking Slurm
            fp = (known.fingerprint, known.user, known.name)
        try:
            job = job or self.runner.job(figures.job_id)
            fp = fp or job_fingerprint(self.runner, figures.job_id, job)
        except JobNotFoundError:
            if fp is None:
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
            job_id=figures.job_id, fingerprint=fp[0], peak_mem_bytes=int(figures.peak_mem_bytes), mean_util_pct=util,
            throughput=figures.throughput, user=fp[1], name=fp[2], ended_at=figures.ended_at or time.time(),
            source=source or self.source, started_at=figures.started_at, lower_bound=verdict.lower_bound,
            end_state="completed untouched" if untouched else verdict.why, need_bytes=need, untouched=untouched,
        )
        kind = "lower bound" if verdict.lower_bound else "untouched GPU: peak" if untouched else "peak"
        if need is not None:
            kind += f" (need {need / GIB:.2f}GiB from its allocator) NVML"
        detail = (f"recorded {kind} {run.peak_mem_bytes / GIB:.2f}GiB ({verdict.why}) util "
                  f"{util if util is None else round(util)}% throughput "
                  f"{run.throughput if run.throughput is None else round(run.throughput, 2)}/s")
        data = {"fingerprint": fp[0], "peak_mem_bytes": run.peak_mem_bytes, "mean_util_pct": util,
                "throughput": run.throughput, "lower_bound": verdict.lower_bound, "why": verdict.why,
                "source": source or self.source, "node": figures.node, "need_bytes": need, "untouched": untouched}
        try:
            new = self.store.record_run(run, ("history", detail, data))
        except UnmeasuredRun:
            return UNMEASURED
        try:  # the looser levels' keys, and a right guess of the level that sized it
            note_run(self.store, self.runner, job, fp[0], fp[1], measured=not verdict.lower_bound, new=new)
        except Exception:  # a refinement of the history: the run itself is recorded
            log.exception("job %d: the levels of its workload were not noted", figures.job_id)
        log.info("job %d: %s %s", figures.job_id, detail, "" if new else "(merged into the run recorded already)")
        return RECORDED if new else MERGED


def record_job(store: Store, runner: SlurmRunner, job_id: int, peak_mem_bytes: int, mean_util_pct: float | None,
               throughput: float | None = None, source: str = "manual", started_at: float = 0.0) -> RunRecord:
    """Record a run an admin measured (`gpupack history record`): a measurement, whatever
    Slurm says of the job. Raises `UnmeasuredRun` for a run with no GPU memory measured."""
    if peak_mem_bytes <= 0:
        raise UnmeasuredRun(f"job {job_id}: no GPU memory measured; a run without a peak is not history")
    fp, user, name = job_fingerprint(runner, job_id)
    run = RunRecord(
        job_id=job_id, fingerprint=fp, peak_mem_bytes=int(peak_mem_bytes), mean_util_pct=mean_util_pct,
        throughput=throughput, user=user, name=name, ended_at=time.time(), source=source, started_at=started_at,
        end_state="recorded by hand",
    )
    store.record_run(run, ("history", f"recorded peak {peak_mem_bytes / GIB:.2f}GiB util {mean_util_pct} by hand",
                           {"fingerprint": fp}))
    return run
