"""A run's memory curve, stored when the monitor sees the run end (however it ended: completed,
failed, requeued for memory or contention), so the job's web page and `gpupack history show`
still have it after the node agent dropped the job's samples."""
from __future__ import annotations

import logging
import sqlite3

from store.curves import RunCurves
from packer.curves import CurvePoint, RunCurve, downsample
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.tracks import Track, partition_of

log = logging.getLogger(__name__)


def curve_of_track(ctx: RoundContext, track: Track, end_state: str, started_at: float) -> RunCurve | None:
    """The track's samples as a stored curve (downsampled), keyed by `started_at` (the run's
    key in the history); None when it has no samples."""
    if not track.samples:
        return None
    points = [CurvePoint(s.at - track.started_at, int(s.mem_bytes), int(max(s.peak_mem_bytes, s.mem_bytes)))
              for s in track.samples]
    capacity, label = partition_of(track, ctx.config.share_bytes, ctx.gpu_model)
    return RunCurve(
        job_id=track.job_id, fingerprint=track.fingerprint or "", started_at=started_at, ended_at=ctx.now,
        end_state=end_state, node=track.node, gpu_index=track.gpu_index, isolation=track.isolation,
        shards=track.shards, capacity_bytes=capacity, capacity_label=label, samples=len(points),
        points=downsample(points),
    )


EARLIER_RUNS = 10  # a workload's newest stored curves the memory forecast takes as its prior


def _need_of(ctx: RoundContext, job_id: int, started_at: float) -> int | None:
    """What the recorded run of `job_id` begun at `started_at` needed (None: not known)."""
    try:
        run = ctx.actions.store.run_of(job_id, started_at)
    except sqlite3.Error as exc:
        log.warning("job %d: its recorded run not read: %s", job_id, exc)
        return None
    return run.need_bytes if run is not None else None


def history_prior(ctx: RoundContext, track: Track):
    """The workload's earlier runs (its fingerprint's newest stored curves, not this run's)
    as the memory forecast's prior (`predictor.prior.HistoryPrior`, aligned by seconds since
    each run's start); None without a fingerprint or a stored curve. A run that ran out of
    memory in its share (`packer.action_outcomes.ran_out`) went past that share whatever its
    curve shows. A run whose history has what it needed (`RunRecord.need_bytes`: its allocator's
    peak, `packer.need`) says no more than that: its curve is NVML's, the allocator's reserve
    included, and read as it is it would forecast the reserve as growth and grow the job into it.
    A store that cannot be read leaves the forecast without history (logged)."""
    from packer.action_outcomes import ran_out
    from predictor.prior import HistoryPrior, PriorRun

    if not track.fingerprint:
        return None
    try:
        curves = RunCurves(ctx.actions.store).of_fingerprint(track.fingerprint, limit=EARLIER_RUNS + 1)
    except sqlite3.Error as exc:
        log.warning("job %d: earlier runs' curves not read, forecast without them: %s", track.job_id, exc)
        return None
    runs = []
    for c in curves:
        if (c.job_id == track.job_id and abs(c.started_at - track.started_at) <= 0.5) or not c.points:
            continue  # this run's own curve (a requeue stored it) is no history of it
        steps, values = [], []
        need = _need_of(ctx, c.job_id, c.started_at)
        for p in c.points:
            if not steps or p.t > steps[-1]:
                steps.append(p.t)
                value = float(max(p.peak_bytes, p.mem_bytes))  # what the watch feeds the forecaster
                values.append(value if need is None else min(value, float(need)))
        exceeded = c.capacity_bytes if c.capacity_bytes and ran_out(c.peak_bytes, c.capacity_bytes, c.end_state) else None
        runs.append(PriorRun(tuple(steps), tuple(values), name=f"job {c.job_id} at {c.started_at:.0f}",
                             exceeded=exceeded))
    return HistoryPrior(runs[:EARLIER_RUNS]) if runs else None


def keep_curve(ctx: RoundContext, track: Track, end_state: str, started_at: float | None = None) -> None:
    """Store the ended run's curve (`[monitor] curves_per_fingerprint` of each workload are
    kept); a run with no GPU memory measured leaves none (it would only push a real curve out).
    A failure to store is logged: the curve is for the admin, nothing depends on it."""
    keep = ctx.settings.curves_per_fingerprint
    if keep <= 0:
        return
    curve = curve_of_track(ctx, track, end_state, track.started_at if started_at is None else started_at)
    if curve is None or curve.peak_bytes <= 0:
        return  # no GPU memory measured (a run cancelled as it started): nothing to show
    try:
        RunCurves(ctx.actions.store).save(curve, keep)
    except (sqlite3.Error, ValueError) as exc:
        log.warning("job %d: memory curve not stored: %s", track.job_id, exc)
        return
    log.debug("job %d: stored its run's memory curve (%s)", track.job_id, curve.summary())
