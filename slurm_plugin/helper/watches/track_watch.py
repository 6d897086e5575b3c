"""The watch that keeps the monitor's `tracks.Track` of each running job."""
from __future__ import annotations

from collections.abc import Callable

from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.tracks import ACTIVE, Track, job_shards


class TrackWatch:
    """Adds each round's newest samples to the tracks of running jobs (a new run starts over).
    ``on_run_ended(ctx, track, end_state)``: what to do with a run that ended between two
    rounds (the monitor keeps its curve, `run_curves.keep_curve`)."""

    name = "tracks"

    def __init__(self, on_run_ended: Callable[[RoundContext, Track, str], None] | None = None):
        self.on_run_ended = on_run_ended

    def round(self, ctx: RoundContext) -> None:
        tracks = ctx.state.tracks
        for sample in ctx.samples:
            job = ctx.jobs.get(sample.job_id)
            if job is None or job.state not in ACTIVE:
                continue
            track = tracks.get(sample.job_id)
            started = sample.started_at or (job.start_time.timestamp() if job.start_time else sample.at)
            if track is None or abs(track.started_at - started) > 0.5:
                # first sight, or a new run of a requeued job: start over
                if track is not None and self.on_run_ended is not None:  # the earlier run ended between two rounds
                    self.on_run_ended(ctx, track, "REQUEUED")
                track = Track(
                    job_id=job.job_id, fingerprint=ctx.fingerprint_of(job), node=sample.node,
                    gpu_index=sample.gpu_index, isolation=sample.isolation, started_at=started,
                    shards=job_shards(job), user=job.user or "", name=job.name or "",
                )
                tracks[job.job_id] = track
            if not track.samples or sample.at > track.samples[-1].at:
                track.samples.append(sample)
                track.isolation = sample.isolation
            track.last_state = job.state
