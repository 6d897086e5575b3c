"""History: a tracked job that ended COMPLETED has its peak memory, mean utilisation and
throughput written under its fingerprint (what the submit path estimates from).

One row per run (job, fingerprint, start), shared with the Epilog's record of the same run;
a run with no GPU memory measured is left out (it would teach the packer a 0-byte job).
Every run that ends (whatever its end) also leaves its memory curve (`run_curves`), under
the same key when it is history."""
from __future__ import annotations

import logging

from packer.store import RunRecord
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.run_curves import keep_curve
from slurm_plugin.helper.watches.tracks import ACTIVE, Track

log = logging.getLogger(__name__)

GIB = 1024**3
REQUEUED = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED")


class HistoryWatch:
    """Drops the tracks of jobs that left; records the runs that completed; keeps every ended
    run's memory curve."""

    name = "history"

    def round(self, ctx: RoundContext) -> None:
        requeued = ctx.state.requeued_tracks
        while requeued:
            track, kind = requeued.pop(0)
            keep_curve(ctx, track, f"REQUEUED by {kind}")
        self._record_finished(ctx)

    def _record_finished(self, ctx: RoundContext) -> None:
        tracks = ctx.state.tracks
        for job_id, track in list(tracks.items()):
            job = ctx.jobs.get(job_id)
            state = job.state if job is not None else "GONE"
            if state in ACTIVE:
                continue
            del tracks[job_id]
            started_at = None
            if state != "COMPLETED" or not track.fingerprint or not track.samples:
                if state not in REQUEUED:
                    log.info("job %d ended %s: not recorded in the history", job_id, state)
            else:
                started_at = self._record(ctx, track)
            keep_curve(ctx, track, state, started_at)

    def _record(self, ctx: RoundContext, track: Track) -> float:
        """Record the completed run; returns its key's start (the Epilog's, when the agent's
        summary gives it)."""
        job_id = track.job_id
        final = self._final_stats(ctx, track)
        if final and float(final.get("ended_at") or 0) <= track.started_at:
            final = None  # the summary of an earlier run of this requeued job, not of this one
        peak = max(s.peak_mem_bytes for s in track.samples)
        utils = [s.util_pct for s in track.samples if s.util_pct is not None]
        thr = [s.throughput for s in track.samples if s.throughput is not None]
        mean_util = sum(utils) / len(utils) if utils else None
        mean_thr = sum(thr) / len(thr) if thr else None
        started_at = track.started_at
        if final:
            peak = max(peak, int(final.get("peak_mem_bytes") or 0))
            mean_util = final.get("mean_util_pct") if final.get("mean_util_pct") is not None else mean_util
            mean_thr = final.get("mean_throughput") if final.get("mean_throughput") is not None else mean_thr
            started_at = float(final.get("started_at") or started_at)  # the Epilog keys the run by the agent's start
        if peak <= 0:
            log.info("job %d completed with no GPU memory measured: not recorded in the history", job_id)
            return started_at
        if mean_util is not None:
            mean_util = min(100.0, max(0.0, float(mean_util)))
        store = ctx.actions.store
        try:
            new = store.record_run(RunRecord(
                job_id=job_id, fingerprint=track.fingerprint or "", peak_mem_bytes=int(peak),
                mean_util_pct=mean_util, throughput=mean_thr, user=track.user, name=track.name,
                ended_at=ctx.now, source="monitor", started_at=started_at,
            ))
        except ValueError as exc:
            log.warning("job %d: history not recorded: %s", job_id, exc)
            return started_at
        if not new:
            log.debug("job %d: this run was recorded already (by the Epilog): merged", job_id)
            return started_at
        store.log_event(
            "history", f"recorded peak {peak / GIB:.2f}GiB util {mean_util if mean_util is None else round(mean_util)}% "
            f"throughput {mean_thr if mean_thr is None else round(mean_thr, 2)}/s", job_id,
            fingerprint=track.fingerprint, peak_mem_bytes=int(peak), mean_util_pct=mean_util, throughput=mean_thr,
        )
        return started_at

    def _final_stats(self, ctx: RoundContext, track: Track) -> dict | None:
        try:
            from slurm_plugin.agent.client import final_stats
        except ImportError:
            return None
        try:
            return final_stats(ctx.agent_state_dir, track.node, track.job_id, wait_s=0.5)
        except Exception as exc:  # the agent's summary is a bonus; our samples suffice
            log.debug("job %d: no final summary from the agent: %s", track.job_id, exc)
            return None
