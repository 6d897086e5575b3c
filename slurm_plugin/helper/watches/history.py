"""History: every run the monitor saw end is recorded under its fingerprint, as a measurement
(it completed, and its samples cover it) or as a lower bound (it failed, was cancelled, ran
out of memory, was requeued by Slurm or by one of the suite's actions, or its samples have a
gap: its agent was down), by `slurm_plugin.history_recorder` (`packer.run_truth`).

One row per run (job, fingerprint, the agent's start), shared with the other paths that see
it end (the sweep of the agents' final summaries, the controller's epilog); a run with no GPU
memory measured is left out (it would teach the packer a 0-byte job). Every `finals.SWEEP_S`
this watch also sweeps every GPU node's unacknowledged final summaries: the runs nobody
recorded (the watcher was down, the agent was down and is back). Every run that ends
(whatever its end) also leaves its memory curve (`run_curves`), under the same key."""
from __future__ import annotations

import logging

from packer.run_truth import GAP_TOLERANCE_S, RunEnd, sample_gaps
from slurm_plugin.helper.finals import SWEEP_S, FinalsSource, FinalsSweep, LocalFinals
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.run_curves import keep_curve
from slurm_plugin.helper.watches.tracks import ACTIVE, Track
from slurm_plugin.history_recorder import NOT_FINISHED, HistoryRecorder, RunFigures, run_end
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)

REQUEUED = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED")


class HistoryWatch:
    """Records the runs that ended; keeps every ended run's memory curve; sweeps the agents'
    final summaries now and then."""

    name = "history"

    def __init__(self, finals: FinalsSource | None = None, sweep_s: float = SWEEP_S):
        self.finals = finals  # None: the agents' final files under the round's agent_state_dir
        self.sweep_s = sweep_s
        self._next_sweep = 0.0

    def round(self, ctx: RoundContext) -> None:
        if self.finals is None:
            self.finals = LocalFinals(ctx.agent_state_dir)
        requeued = ctx.state.requeued_tracks
        while requeued:
            track, kind = requeued.pop(0)
            started_at = self._record(ctx, track, ctx.jobs.get(track.job_id), kind)
            keep_curve(ctx, track, f"REQUEUED by {kind}", started_at)
        self._record_finished(ctx)
        if ctx.now >= self._next_sweep:
            self._next_sweep = ctx.now + self.sweep_s
            self._sweep(ctx)

    def _recorder(self, ctx: RoundContext, source: str) -> HistoryRecorder:
        return HistoryRecorder(ctx.actions.store, ctx.actions.runner, source)

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
        figures = _track_figures(track, sample_gaps([s.at for s in track.samples], end_at, tolerance), end_at)
        summary = self._summary(track)
        if summary is not None:
            figures = _merged(figures, summary)
        if job is not None:
            end = run_end(job, figures.started_at, ended_by)
        else:  # Slurm forgot it between two rounds: how it ended is not known
            end = RunEnd("GONE", ended_by=ended_by)
        if end is None:
            end = RunEnd(job.base_state or "GONE", ended_by=ended_by)  # a track ends only when its run did
        try:
            outcome = self._recorder(ctx, "monitor").record(
                figures, job, (track.fingerprint, track.user, track.name), end)
        except (SlurmError, ValueError) as exc:
            log.warning("job %d: history not recorded: %s", track.job_id, exc)
            return figures.started_at
        if summary is not None and outcome != NOT_FINISHED:
            self.finals.ack(track.node, [track.job_id])
        return figures.started_at

    def _summary(self, track: Track) -> dict | None:
        """The agent's final summary of the track's run, when it has one already."""
        try:
            summaries = self.finals.collect(track.node)
        except (OSError, ValueError) as exc:  # the agent is away: the track is all there is
            log.debug("job %d: no final summary from %s: %s", track.job_id, track.node, exc)
            return None
        for s in summaries:
            if s.get("job_id") == track.job_id and float(s.get("ended_at") or 0) > track.started_at:
                return s  # not an earlier run's of this requeued job
        return None

    def _sweep(self, ctx: RoundContext) -> None:
        try:
            nodes = [n.name for n in ctx.actions.runner.nodes() if n.gpus_total > 0]
        except SlurmError as exc:
            log.info("history sweep skipped, Slurm did not answer: %s", exc)
            return
        tracked = set(ctx.state.tracks)  # running: their summaries are for the round that sees them end
        FinalsSweep(self.finals, self._recorder(ctx, "sweep")).sweep(nodes, only=lambda job_id: job_id not in tracked)


def _track_figures(track: Track, gaps_s: float, ended_at: float) -> RunFigures:
    samples = track.samples
    utils = [s.util_pct for s in samples if s.util_pct is not None]
    thr = [s.throughput for s in samples if s.throughput is not None]
    return RunFigures(
        job_id=track.job_id, node=track.node, started_at=track.started_at,
        peak_mem_bytes=max(max(s.peak_mem_bytes, s.mem_bytes) for s in samples),
        mean_util_pct=sum(utils) / len(utils) if utils else None,
        throughput=sum(thr) / len(thr) if thr else None, gaps_s=gaps_s, ended_at=ended_at,
    )


def _merged(track: RunFigures, summary: dict) -> RunFigures:
    """The track and the agent's summary of one run: the larger peak, the agent's means and
    start (the run's key), the earlier end and the smaller gap (the run is whole if either saw
    it whole)."""
    agent = RunFigures.from_summary(summary)
    gaps = [g for g in (track.gaps_s, agent.gaps_s) if g is not None]
    return RunFigures(
        job_id=track.job_id, node=track.node, started_at=agent.started_at or track.started_at,
        peak_mem_bytes=max(track.peak_mem_bytes, agent.peak_mem_bytes),
        mean_util_pct=agent.mean_util_pct if agent.mean_util_pct is not None else track.mean_util_pct,
        throughput=agent.throughput if agent.throughput is not None else track.throughput,
        gaps_s=min(gaps) if gaps else None, ended_at=min((t for t in (track.ended_at, agent.ended_at) if t), default=0.0),
    )
