"""What a job's page shows, assembled from plain data (no I/O here): its decision, the
history estimate its decision came from, its memory curve with the forecast and the size of
its partition (a finished job: the curve stored at its run's end, no forecast), and its events."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from packer import comment as comment_mod
from packer.curves import CurvePoint, RunCurve
from packer.decision import Estimate
from packer.samples import JobSample
from store.db import RunRecord
from predictor.forecast import Forecast
from slurm_plugin.slurm.model import Job
from slurm_plugin.web.model import ACTIVE, EventRow, JobRow, job_row

__all__ = ["CurvePoint", "JobDetail", "as_stored", "assemble_job", "curve_of", "this_run"]


@dataclass(frozen=True)
class JobDetail:
    job_id: int
    row: JobRow | None  # None: Slurm no longer knows the job
    admin_comment: str
    record_fields: dict[str, str]
    estimate: Estimate | None  # from the history of the job's fingerprint
    remembered_shards: int | None  # size remembered after a memory restart
    runs: tuple[RunRecord, ...]  # recent finished runs of the same fingerprint
    node: str | None
    gpu_index: int | None
    isolation: str | None
    curve: tuple[CurvePoint, ...]
    capacity_bytes: float | None  # the partition the job runs in
    capacity_label: str
    forecast: Forecast | None
    events: tuple[EventRow, ...]
    stored: RunCurve | None = None  # a job not running: its latest run's curve, stored at the run's end
    earlier: tuple[RunCurve, ...] = ()  # the stored curves of its earlier runs (restarted, requeued), latest first

    @property
    def running(self) -> bool:
        return self.row is not None and self.row.state in ACTIVE

    @property
    def finished(self) -> bool:
        """Slurm forgot it, or it is neither running nor waiting for its first run."""
        return self.row is None or (self.row.state not in ACTIVE and self.row.state != "PENDING")


def curve_of(samples: Sequence[JobSample], started_at: float) -> tuple[CurvePoint, ...]:
    return tuple(CurvePoint(s.at - started_at, s.mem_bytes, max(s.peak_mem_bytes, s.mem_bytes)) for s in samples)


def this_run(samples: Iterable[JobSample]) -> tuple[list[JobSample], float | None]:
    """The samples of the job's latest run (a requeued job starts over), oldest first."""
    ordered = sorted(samples, key=lambda s: s.at)
    if not ordered:
        return [], None
    started = ordered[-1].started_at if ordered[-1].started_at is not None else ordered[0].at
    return [s for s in ordered if (s.started_at or started) == started], started


def assemble_job(job_id: int, job: Job | None, *, samples: Sequence[JobSample], started_at: float | None,
                 estimate: Estimate | None, remembered_shards: int | None, runs: Iterable[RunRecord],
                 events: Iterable[EventRow], capacity: tuple[float | None, str],
                 forecast: Forecast | None, stored: RunCurve | None = None,
                 earlier: Iterable[RunCurve] = ()) -> JobDetail:
    """`stored`: a job without samples (not running) shows its latest run's stored curve,
    with the partition that run had and no forecast. `earlier`: its earlier runs' curves."""
    record = comment_mod.parse(job.admin_comment) if job is not None else None
    earlier = tuple(earlier)
    last = samples[-1] if samples else None
    d = JobDetail(
        job_id=job_id,
        row=job_row(job) if job is not None else None,
        admin_comment=(job.admin_comment or "") if job is not None else "",
        record_fields=dict(record.fields) if record is not None else {},
        estimate=estimate,
        remembered_shards=remembered_shards,
        runs=tuple(runs),
        node=last.node if last else None,
        gpu_index=last.gpu_index if last else None,
        isolation=last.isolation if last else None,
        curve=curve_of(samples, started_at) if samples and started_at is not None else (),
        capacity_bytes=capacity[0],
        capacity_label=capacity[1],
        forecast=forecast,
        events=tuple(events),
        earlier=earlier,
    )
    if stored is not None and not samples:
        return replace(as_stored(d, stored), earlier=earlier)
    return d


def as_stored(d: JobDetail, curve: RunCurve) -> JobDetail:
    """`d` with `curve` as its stored curve (an earlier run's plot on the job's page)."""
    return replace(d, node=curve.node, gpu_index=curve.gpu_index, isolation=curve.isolation, curve=curve.points,
                   capacity_bytes=curve.capacity_bytes, capacity_label=curve.capacity_label, forecast=None,
                   stored=curve, earlier=())
