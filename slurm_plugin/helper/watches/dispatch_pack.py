"""Decided again at dispatch, the other way: a pending job made exclusive at submit only because
a whole GPU was idle then (`reason=idle-gpu`) is packed when its turn comes with no idle whole
GPU it may use and its history says it fits a share (`packer.dispatch.packed_at_dispatch`,
then the submit pipeline's `admit` stage, `SuiteRules.admit`, again on today's history with no
GPU idle; pair avoidance then comes from the steering watch, as for any pending packed job).

Its request becomes `shard:<k>` (its GPU type kept) with `scontrol update Gres=`, which
replaces a pending job's GRES from 23.02 on. 22.05 validates the new GRES against a copy of
the job's request (a `gpu:1` job asking for shards too is "Invalid generic resource (gres)
specification"): there it cannot be done, so the watch does not try and says so once per job
(event `pack-at-dispatch-unsupported`); the job starts on a whole GPU when one frees. Its
record says `packed shard:<k> reason=packed-at-dispatch` (the fingerprint kept), so
`restore-whole` never hands it a whole GPU back. An event `pack-at-dispatch` with the reason;
in shadow mode (`[monitor.actions] pack-at-dispatch = "shadow"`, or observe/advise mode) only
the event, marked `shadow`. Only with `[packer] pack_only_when_no_idle_gpu` (the rule it
re-makes). Once per job; a first run only (a requeued job is sized by what requeued it).
"""
from __future__ import annotations

import logging

from packer import comment as comment_mod
from packer.config import GIB
from packer.decision import ClusterView
from packer.dispatch import QueuedJob, packed_at_dispatch
from packer.request import Candidate, gres_text
from slurm_plugin.helper.watches.dispatch import first_turns, idle_whole_gpus
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.tracks import job_gpu_type, job_shards
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)

KIND = "pack-at-dispatch"
REASON = "packed-at-dispatch"
SUBMIT_REASON = "idle-gpu"


def _gpus(job: Job) -> int:
    return sum(i.count for i in job.gres if i.name == "gpu" and i.per == "node")


class PackAtDispatchWatch:
    name = "pack-at-dispatch"

    def __init__(self) -> None:
        self.done: set[int] = set()  # jobs decided (packed, tried, or found not to fit): once per job
        self.ran: set[int] = set()  # jobs seen running: a requeued one is not at a first turn

    def round(self, ctx: RoundContext) -> None:
        mode = ctx.actions.mode_of(KIND)
        if mode.mode == "off" or not ctx.config.pack_only_when_no_idle_gpu:
            return
        pending, moved = first_turns(ctx, self.ran)
        self.done &= {j.job_id for j in pending}
        ours = {j.job_id for j in pending if _gpus(j) == 1 and job_shards(j) is None and not j.restart_cnt
                and j.job_id not in moved and j.job_id not in self.done and _exclusive_for_idle(j)}
        if not ours:
            return
        idle = idle_whole_gpus(ctx)
        if idle is None:
            return
        queue = [QueuedJob(j.job_id, j.priority or 0, job_shards(j) is not None, gpus=max(_gpus(j), 1),
                           excluded=frozenset(j.excluded_nodes), required=frozenset(j.required_nodes),
                           repack=j.job_id in ours)
                 for j in pending if job_shards(j) is not None or _gpus(j)]
        for job_id in packed_at_dispatch(queue, idle):
            self.done.add(job_id)
            self._decide(ctx, ctx.jobs[job_id], mode.acts, mode.label)

    def _decide(self, ctx: RoundContext, job: Job, acts: bool, label: str) -> None:
        record = comment_mod.parse(job.admin_comment)
        fp = record.fingerprint if record else None
        if not fp:
            return
        gpu_type = job_gpu_type(job)
        estimate, remembered = ctx.actions.store.history(fp, ctx.config.history_window,
                                                         since=ctx.config.history_since(ctx.now))
        # the submit pipeline's `admit` stage (the replay's rule too), with no GPU idle now
        verdict = ctx.rules.admit(Candidate(field="tres_per_node", gpu_type=gpu_type, dialect="gres/"), estimate,
                                  ClusterView(idle_gpus=0), fp, remembered)
        if verdict.verdict != "packed" or verdict.shards is None:
            log.info("job %d: no whole GPU idle at its turn, and still exclusive (%s)", job.job_id, verdict.reason)
            return
        est = verdict.estimate
        why = (f"its turn came with no whole GPU idle, and its history ({est.source_label if est else '?'}, "
               f"{(est.peak_mem_bytes if est else 0) / GIB:.2f}GiB) fits {verdict.shards} shares: gpu:1 -> "
               f"shard:{verdict.shards}")
        to = gres_text("shard", verdict.shards, gpu_type)
        if not _replaces_gres(ctx):
            ctx.actions.log_event(KIND + "-unsupported", f"not packed: {why}, but this Slurm ({_release(ctx)}) cannot "
                                  "change a pending job's gpu request into shards; it waits for a whole GPU",
                                  job.job_id, to=to)
            return
        if not acts:
            ctx.actions.log_event(KIND, f"would pack it ({label} mode): {why}", job.job_id, shadow=True,
                                  to=to, reason=REASON)
            return
        line = comment_mod.render("packed", shards=verdict.shards, reason=REASON,
                                  est=f"{est.peak_mem_bytes / GIB:.1f}GiB" if est else None,
                                  src=est.source_label if est else None, fp=fp)
        try:
            ctx.actions.update_job(job.job_id, Gres=to, AdminComment=comment_mod.merge(job.admin_comment, line))
        except SlurmError as exc:
            ctx.actions.log_event(KIND + "-failed", f"could not pack it ({exc}); it waits for a whole GPU", job.job_id,
                                  to=to)
            log.info("job %d: not packed at dispatch: %s", job.job_id, exc)
            return
        ctx.actions.log_event(KIND, f"packed: {why}", job.job_id, to=to, reason=REASON,
                              shards=verdict.shards)
        log.info("job %d: %s", job.job_id, why)


def _exclusive_for_idle(job: Job) -> bool:
    record = comment_mod.parse(job.admin_comment)
    return record is not None and record.applied_verdict == "exclusive" and record.reason == SUBMIT_REASON


def _replaces_gres(ctx: RoundContext) -> bool:
    try:
        return ctx.actions.runner.version().replaces_gres_on_update
    except SlurmError:
        return False


def _release(ctx: RoundContext) -> str:
    try:
        return str(ctx.actions.runner.version())
    except SlurmError:
        return "its release unknown"
