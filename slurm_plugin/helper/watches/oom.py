"""Out-of-memory ends: a packed job that ran out of memory in its share is
requeued at the head on a size that holds it, before Slurm marks it FAILED where it can.

The node agents hold each such end (`slurm_plugin.agent.oom_ends`: the step's nonzero exit
and the allocation that failed at the share's limit) and list it with their samples. This
watch decides with `packer.oom_restart` (the simulator's code too): requeue on the next size
that holds what the job needed, or a whole GPU, remembering the size, at the head of the queue
when the node measured the job at its share's limit, at its own place when the end rests on
the job's word only (its report, or a framework's text in its output; issue 33); or leave it
FAILED with the reason (retries capped per job and per workload, `--no-requeue`, a whole GPU
this Slurm cannot give a shard job). Either way it answers the agent (`settle_oom`), which
lets the step end: the job is requeued while Slurm still has it RUNNING, so `afternotok`
dependents never see a failure. An end the agent stopped holding (the helper was late) is a
job Slurm already marked FAILED: it is requeued all the same while slurmctld holds it.

The failed run's curve is kept as a lower bound (`Actions` ends the run with this action's
kind; `packer.run_truth`), never as the workload's size. Mode `[monitor.actions]
restart-oom`: off | shadow | enforce; with the kill switch on nothing is requeued and every
held end is let go at once.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from packer import comment as comment_mod
from packer.decision import max_shards
from packer.oom_restart import (KIND, MEASURED, REPORTED, OomDecision, OomEvidence, OomRetryLimits,
                                decide_oom_restart)
from packer.request import gres_text
from slurm_plugin.helper.level_guesses import note_wrong_guess
from slurm_plugin.helper.watches.memory import _shard_job_may_become_gpu_job
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.tracks import job_gpu_type
from slurm_plugin.slurm.errors import SlurmError

log = logging.getLogger(__name__)

GIB = 1024**3
WORKLOAD_WINDOW_S = 86400.0  # a workload's retries count over the last day
EVENTS_READ = 1000


class OomWatch:
    name = "oom"

    def __init__(self, ends: Callable[[], Mapping[str, Sequence[dict]]]):
        self._ends = ends  # node -> the OOM ends its agent holds (AgentSamples.oom_ends)
        self._answered: dict[tuple[int, float], str] = {}  # (job, end time) -> outcome told

    def round(self, ctx: RoundContext) -> None:
        listed = {key for ends in self._ends().values() for e in ends if (key := _end_key(e)) is not None}
        self._answered = {k: v for k, v in self._answered.items() if k in listed}  # the agents forgot the rest
        for node, ends in list(self._ends().items()):
            for end in ends:
                try:
                    self._one(ctx, node, end)
                except (KeyError, TypeError, ValueError) as exc:
                    log.warning("node %s sent an out-of-memory end that cannot be read (%s): %r", node, exc, end)

    def _one(self, ctx: RoundContext, node: str, end: dict) -> None:
        job_id, at = int(end["job_id"]), float(end["at"])
        outcome = self._answered.get((job_id, at))
        if outcome is None:
            outcome = self._answered[(job_id, at)] = self._decide(ctx, node, end, job_id)
        self._settle(ctx, node, job_id, outcome)

    def _decide(self, ctx: RoundContext, node: str, end: dict, job_id: int) -> str:
        actions = ctx.actions
        mode = actions.mode_of(KIND)
        if actions.halted:
            return "not requeued: the kill switch is on"
        if mode.mode == "off":
            return "not requeued: restart-oom is off"
        job = ctx.jobs.get(job_id)
        try:
            job = job if job is not None and job.state != "COMPLETING" else actions.runner.job(job_id)
        except SlurmError as exc:
            actions.log_event(KIND + "-failed", f"out of memory on {node}, but Slurm does not show the job: {exc}",
                              job_id)
            return "not requeued: Slurm does not show the job"
        evidence = OomEvidence(int(end["exit_code"]), float(end["limit_bytes"]), float(end["peak_bytes"]),
                               end.get("asked_bytes"), end.get("held_bytes"), bool(end.get("said_oom")))
        told = end.get("evidence")
        if told is not None and told not in (MEASURED, REPORTED):
            raise ValueError(f"evidence must be {MEASURED} or {REPORTED}, got {told!r}")
        fp = ctx.fingerprint_of(job)
        decision = decide_oom_restart(
            evidence, shards=int(end["shards"]), share_bytes=ctx.config.share_bytes, max_shards=max_shards(ctx.config),
            job_retries=self._retries(ctx, job_id=job_id), workload_retries=self._retries(ctx, fingerprint=fp),
            limits=OomRetryLimits(ctx.settings.oom_retries_per_job, ctx.settings.oom_retries_per_workload),
            requeueable=job.requeue is not False, forecast_bytes=self._forecast(ctx, job_id),
            remembered_shards=actions.store.remembered_size(fp) if fp else None,
            whole_gpu_allowed=_shard_job_may_become_gpu_job(ctx))
        data = {"node": node, "gpu": end.get("gpu_index"), "isolation": end.get("isolation"),
                "from_shards": int(end["shards"]), "exit_code": evidence.exit_code,
                "limit_bytes": evidence.limit_bytes, "peak_bytes": evidence.peak_bytes,
                "asked_bytes": evidence.asked_bytes, "need_bytes": decision.need_bytes,
                "lower_bound_bytes": decision.lower_bound_bytes, "fingerprint": fp, "slurm_state": job.state,
                "evidence_kind": decision.evidence, "seen_in": end.get("seen_in"), "said_line": end.get("said_line")}
        note_wrong_guess(actions.store, actions.runner, job, fp, KIND)  # it ran out: its size was wrong
        if not decision.requeue:
            return self._leave(ctx, job, decision, data)
        if fp and mode.acts:  # the size is remembered; the failed run's peak is only a bound
            actions.store.remember_size(fp, decision.shards or max_shards(ctx.config) + 1, KIND)
        gres = (gres_text("gpu", 1, job_gpu_type(job)) if decision.whole_gpu
                else gres_text("shard", decision.shards, job_gpu_type(job)))
        record = (comment_mod.render("exclusive", reason=KIND, fp=fp) if decision.whole_gpu
                  else comment_mod.render("packed", shards=decision.shards, reason=KIND, fp=fp))
        started = float(end.get("started_at") or end["at"])
        done = actions.decide(KIND, job, decision.reason, run_start=started, evidence=data, at=ctx.now, mode=mode,
                              gres=gres, comment=record, to=gres, at_head=decision.at_head, **data)
        if done:
            return f"requeued {'at the head' if decision.at_head else 'at its own place'} with {gres}"
        return f"not requeued ({mode.label} mode or refused): {decision.reason}"

    def _leave(self, ctx: RoundContext, job, decision: OomDecision, data: dict) -> str:
        """Left FAILED with the reason: an event, and the reason in its AdminComment."""
        ctx.actions.log_event(KIND + "-left", decision.reason, job.job_id, **data)
        log.warning("job %d: %s", job.job_id, decision.reason)
        if ctx.actions.mode_of(KIND).acts:
            note = comment_mod.render("exclusive" if decision.need_bytes > ctx.config.share_bytes * max_shards(ctx.config)
                                      else "packed", reason="oom-left", fp=data.get("fingerprint"))
            try:
                ctx.actions.update_job(job.job_id, AdminComment=comment_mod.merge(job.admin_comment, note))
            except SlurmError as exc:
                log.warning("job %d: could not note why it stays failed: %s", job.job_id, exc)
        return "left FAILED: " + decision.reason

    @staticmethod
    def _retries(ctx: RoundContext, *, job_id: int | None = None, fingerprint: str | None = None) -> int:
        """restart-oom requeues (enforced, not shadow) of the job, or of the workload over the last day."""
        if job_id is None and not fingerprint:
            return 0
        since = ctx.now - WORKLOAD_WINDOW_S
        events = ctx.actions.store.events(limit=EVENTS_READ, job_id=job_id)
        return sum(1 for e in events if e.kind == KIND and not e.data.get("shadow")
                   and (job_id is not None or (e.data.get("fingerprint") == fingerprint and e.at >= since)))

    @staticmethod
    def _forecast(ctx: RoundContext, job_id: int) -> float | None:
        """The peak its measured curve forecasts (the memory watch's forecaster) when the
        forecaster is sure of it (it warned); an unsure forecast (a start's ramp extrapolated,
        thousands of GiB) says nothing of the size that holds it."""
        track = ctx.tracks.get(job_id)
        fc = getattr(track, "forecaster", None) if track is not None else None
        last = getattr(fc, "last", None)
        return float(last.predicted_peak_bytes) if last is not None and last.warn else None

    def _settle(self, ctx: RoundContext, node: str, job_id: int, outcome: str) -> None:
        from slurm_plugin.agent.client import AgentRefused, AgentUnavailable, settle_oom

        try:
            settle_oom(ctx.agents, node, job_id, outcome)
        except (AgentUnavailable, AgentRefused, OSError, ValueError) as exc:
            log.warning("job %d: could not answer %s's agent (%s); its step ends when its hold runs out",
                        job_id, node, exc)


def _end_key(end: object) -> tuple[int, float] | None:
    """(job, end time) of an out-of-memory end as an agent lists it; None for one that cannot be
    read (the round passes it over with a warning, and goes on with the others)."""
    try:
        return int(end["job_id"]), float(end["at"])  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        return None
