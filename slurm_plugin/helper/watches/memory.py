"""Memory growth: a per-job `predictor.Forecaster` on the peak memory.

When it is certain the job outgrows its share, the job is requeued at the head on the next
larger size (`packer.preemption.restart_size`) and the size is remembered.
"""
from __future__ import annotations

import logging

from mig.catalog import load_catalog
from mig.errors import MigError
from packer import comment as comment_mod
from packer.decision import max_shards
from packer.request import gres_text
from predictor.forecast import Forecaster
from slurm_plugin.helper.level_guesses import note_wrong_guess
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.run_curves import history_prior
from slurm_plugin.helper.watches.tracks import Track, capacity_of, job_gpu_type
from slurm_plugin.slurm.errors import SlurmError

log = logging.getLogger(__name__)

GIB = 1024**3
KIND = "restart-memory"
def mig_partitions(ctx: RoundContext, track: Track) -> tuple[int, ...]:
    """The share counts a MIG slice holds, for a job on one (its restart rounds up to one,
    as the replay's does); () for a job on shares, or a model the catalogue does not hold
    (`tracks.capacity_of` said so)."""
    if not track.isolation.startswith("mig:"):
        return ()
    try:
        return ctx.rules.mig_partitions(load_catalog(ctx.gpu_model))
    except MigError:
        return ()


def track_forecast(ctx: RoundContext, t: Track, job, capacity: float):
    """The run's memory forecast, brought up to date with every sample since the last round
    (oldest first); one forecaster per run, shared by the watches that read it (grow, memory).
    Its prior is the workload's earlier runs' stored curves (`run_curves.history_prior`), read
    once per run. None before the first sample."""
    if t.forecaster is None:
        # forecast to the job's end (its time limit) when Slurm knows it
        horizon = ctx.settings.memory_horizon_s
        if job.end_time is not None and job.end_time.timestamp() > t.started_at:
            horizon = min(horizon, job.end_time.timestamp() - t.started_at)
        t.forecaster = Forecaster(capacity, horizon, prior=history_prior(ctx, t))
    fc = t.forecaster
    fc.set_act_within(ctx.act_s)  # seconds since the job started are its steps
    for sample in t.samples:
        step = sample.at - t.started_at
        if step > t.forecast_step:
            fc.update(step, max(sample.peak_mem_bytes, sample.mem_bytes))
            t.forecast_step = step
    return fc.last


class MemoryWatch:
    name = "memory"

    def round(self, ctx: RoundContext) -> None:
        if ctx.actions.mode_of(KIND).mode != "off":
            ctx.acted |= self._check_memory(ctx, ctx.acted)

    @staticmethod
    def _price(ctx: RoundContext, t: Track, job, forecast, capacity: float, confidence: float):
        """Restart now or let it run (`ctx.rules.restart`, predictor.restart): the work each
        choice loses. The helper does not see a job's checkpoints, so its work counts from the
        run's start."""
        now = max(t.samples[-1].at, t.started_at)  # the agent's clock, as the run's start
        crossing = t.started_at + forecast.crossing_step if forecast.crossing_step is not None else now
        end = job.end_time.timestamp() if job.end_time is not None else None
        return ctx.rules.restart(now_s=now, checkpoint_s=t.started_at, crossing_s=max(crossing, now), end_s=end,
                                 predicted_peak_bytes=forecast.predicted_peak_bytes, capacity_bytes=capacity,
                                 p_oom=confidence)

    def _capacity(self, ctx: RoundContext, track: Track) -> float | None:
        return capacity_of(track, ctx.config.share_bytes, ctx.gpu_model)

    def _check_memory(self, ctx: RoundContext, skip: set[int]) -> set[int]:
        acted: set[int] = set()
        config = ctx.config
        actions = ctx.actions
        mode = actions.mode_of(KIND)
        for t in list(ctx.tracks.values()):
            job = ctx.jobs.get(t.job_id)
            if job is None or job.state != "RUNNING" or not t.shards or t.job_id in skip or not t.samples:
                continue
            capacity = self._capacity(ctx, t)
            if not capacity:
                continue
            forecast = track_forecast(ctx, t, job, capacity)
            if forecast is None or t.memory_judged_step == t.forecast_step:
                continue  # judged once per new sample
            t.memory_judged_step = t.forecast_step
            if not forecast.warn:
                continue
            fc = t.forecaster
            priced = self._price(ctx, t, job, forecast, capacity, fc.options.confidence)
            if not priced.restart:
                if not t.kept_reported:  # said once per run; a later round may still restart it
                    t.kept_reported = True
                    actions.log_event("keep-memory", f"job {t.job_id} kept: {priced.reason}", t.job_id,
                                      lose_now_s=priced.lose_now_s, lose_at_oom_s=priced.lose_at_oom_s)
                continue
            need = max(forecast.upper_bytes, forecast.predicted_peak_bytes)
            # on the share ladder (every rung placeable) where a GPU model is set; else a MIG job
            # rounds up to a slice's share count, as the replay's does
            partitions = config.rungs if config.gpu_model else mig_partitions(ctx, t)
            size = ctx.rules.restart_size(t.shards, need, partitions)
            gres = gres_text("gpu", 1, job_gpu_type(job)) if size.whole_gpu else gres_text("shard", size.shards, job_gpu_type(job))
            remembered = size.shards if size.shards is not None else max_shards(config) + 1
            reason = (f"memory will outgrow shard:{t.shards} ({capacity / GIB:.1f}GiB): forecast "
                      f"{forecast.predicted_peak_bytes / GIB:.1f}GiB (upper {forecast.upper_bytes / GIB:.1f}GiB) "
                      f"by {fc.horizon:.0f}s after its start; restart with {gres}; {priced.reason}")
            if t.fingerprint and mode.acts:
                actions.store.remember_size(t.fingerprint, remembered, "memory-restart")
            if size.whole_gpu and not _shard_job_may_become_gpu_job(ctx):
                if not t.kept_reported:  # a requeue would bring it back on the same share
                    t.kept_reported = True
                    actions.log_event("keep-memory", f"job {t.job_id} kept: it needs a whole GPU (forecast "
                                      f"{forecast.predicted_peak_bytes / GIB:.1f}GiB) and Slurm "
                                      f"{actions.runner.version()} cannot turn a shard job into a GPU job; "
                                      "its next run of this workload is exclusive (size remembered)",
                                      t.job_id, to=gres, from_shards=t.shards)
                continue
            record = (comment_mod.render("exclusive", reason="memory-restart", fp=t.fingerprint)
                      if size.whole_gpu else
                      comment_mod.render("packed", shards=size.shards, reason="memory-restart", fp=t.fingerprint))
            if not actions.first_report(t.job_id, t.started_at):
                continue
            if mode.acts:  # the size it was given was wrong (once per run)
                note_wrong_guess(actions.store, actions.runner, job, t.fingerprint, KIND)
            evidence = {"capacity_bytes": capacity, "from_shards": t.shards, "to": gres, "node": t.node,
                        "gpu": t.gpu_index, "observed_peak_bytes": forecast.observed_peak_bytes,
                        "predicted_peak_bytes": forecast.predicted_peak_bytes, "upper_bytes": forecast.upper_bytes}
            if actions.decide(KIND, job, reason, run_start=t.started_at, evidence=evidence, at=ctx.now, mode=mode,
                              gres=gres, comment=record,
                              fingerprint=t.fingerprint, from_shards=t.shards, to=gres,
                              observed_peak_bytes=forecast.observed_peak_bytes,
                              predicted_peak_bytes=forecast.predicted_peak_bytes):
                acted.add(t.job_id)
        return acted


def _shard_job_may_become_gpu_job(ctx: RoundContext) -> bool:
    """Whether `scontrol update Gres=gpu:1` works on a requeued shard job (not on 22.05);
    when the release is unknown, try (a refused change is released unchanged)."""
    try:
        return ctx.actions.runner.version().replaces_gres_on_update
    except SlurmError:
        return True
