"""History: every run the monitor saw end is recorded under its fingerprint, as a measurement
(it completed, and its samples cover it) or as a lower bound (it failed, was cancelled, ran
out of memory, was requeued by Slurm or by one of the suite's actions, or its samples have a
gap: its agent was down), by `slurm_plugin.history_recorder` (`packer.run_truth`).

This watch hands what the monitor's own samples saw of the run (their gaps: its agent was
away) to the one writer (`helper.run_inbox.RunInbox`, written by the watcher's finals thread,
`helper/finals.py`, never in a round); the agents' final summaries of the same run, brought by
the controller's epilog and by the sweep, merge into the same row (one row per run: job,
fingerprint, the agent's start). A run with no GPU memory
measured is left out (it would teach the packer a 0-byte job), unless it completed and its
samples cover it from start to end on a GPU: it held a GPU and never touched it, a
measurement of 0 bytes and 0 % that packs its workload at the smallest share. Every run that ends
(whatever its end) also leaves its memory curve (`run_curves`), under the same key."""
from __future__ import annotations

import logging

from packer.run_truth import GAP_TOLERANCE_S, RunEnd, sample_gaps
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.run_curves import keep_curve
from slurm_plugin.helper.watches.tracks import ACTIVE, Track
from slurm_plugin.helper.run_inbox import SeenRun
from slurm_plugin.history_recorder import RunFigures, run_end
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)

class HistoryWatch:
    """Records the runs that ended; keeps every ended run's memory curve."""

    name = "history"

    def round(self, ctx: RoundContext) -> None:
        requeued = ctx.state.requeued_tracks
        while requeued:
            track, kind = requeued.pop(0)
            started_at = self._record(ctx, track, ctx.jobs.get(track.job_id), kind)
            keep_curve(ctx, track, f"REQUEUED by {kind}", started_at)
        self._record_finished(ctx)

    def _record_finished(self, ctx: RoundContext) -> None:
        tracks = ctx.state.tracks
        for job_id, track in list(tracks.items()):
            job = ctx.jobs.get(job_id)
            state = job.state if job is not None else "GONE"
            if state in ACTIVE:
                continue
            del tracks[job_id]
            started_at = self._record(ctx, track, job) if track.fingerprint and track.samples else None
            keep_curve(ctx, track, state, started_at)

    def _record(self, ctx: RoundContext, track: Track, job: Job | None, ended_by: str = "") -> float | None:
        """Record the ended run of `track`; returns its key's start (the agent's)."""
        if not track.fingerprint or not track.samples:
            return None
        finished = job is not None and job.is_finished and job.end_time is not None and not ended_by
        end_at = min(job.end_time.timestamp(), ctx.now) if finished else ctx.now  # Slurm's end, else now
        tolerance = max(GAP_TOLERANCE_S, 2 * ctx.settings.interval_s)
        figures = _track_figures(track, sample_gaps([s.at for s in track.samples], end_at, tolerance), end_at,
                                 tolerance)
        if job is not None:
            end = run_end(job, figures.started_at, ended_by)
        else:  # Slurm forgot it between two rounds: how it ended is not known
            end = RunEnd("GONE", ended_by=ended_by)
        if end is None:
            end = RunEnd(job.base_state or "GONE", ended_by=ended_by)  # a track ends only when its run did
        # written by the one writer, off the round (`helper.run_inbox.RunInbox`)
        ctx.actions.finished_runs.put(SeenRun(figures, job, (track.fingerprint, track.user, track.name), end))
        return figures.started_at


def _track_figures(track: Track, gaps_s: float, ended_at: float, tolerance_s: float = GAP_TOLERANCE_S) -> RunFigures:
    """The run as the monitor's samples saw it; `covered` when they reach back to its start
    (the gaps between them and after the last one are `gaps_s`) on a GPU."""
    samples = track.samples
    first = min(s.at for s in samples)
    covered = (len(samples) >= 2 and all(s.gpu_index >= 0 for s in samples)
               and bool(track.started_at) and first - track.started_at <= tolerance_s)
    utils = [s.util_pct for s in samples if s.util_pct is not None]
    thr = [s.throughput for s in samples if s.throughput is not None]
    return RunFigures(
        job_id=track.job_id, node=track.node, started_at=track.started_at,
        peak_mem_bytes=max(max(s.peak_mem_bytes, s.mem_bytes) for s in samples),
        mean_util_pct=sum(utils) / len(utils) if utils else None,
        throughput=sum(thr) / len(thr) if thr else None, gaps_s=gaps_s, ended_at=ended_at, covered=covered,
    )
