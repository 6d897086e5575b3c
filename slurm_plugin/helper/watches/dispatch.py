"""Decided again at dispatch: a pending packed job whose turn comes while a
whole GPU is idle gets the whole GPU back before it starts (`packer.dispatch.whole_gpu_back`).

Its request is restored with `scontrol update Gres=`: `gpu:1` (its type kept) where Slurm
replaces a pending job's GRES on update (23.02 on), else every share of the GPU
(`shard:<shares_per_gpu>`: 22.05 cannot turn a shard job into a GPU job, and all the shares
of a GPU are the GPU: nobody joins it). Its record says `exclusive reason=whole-gpu-at-dispatch`
(the fingerprint kept: its run is history as any other). An event `restore-whole` says so; in
shadow mode (`[monitor.actions] restore-whole = "shadow"`, or observe/advise mode) only the
event, marked `shadow`. Only with `[packer] pack_only_when_no_idle_gpu` (the default: the
decision re-made at dispatch is that one). The watch does not run while the kill switch is on, and
`Actions.update_job` refuses a change then anyway. Once per job (a refused update is not
tried again every round).
"""
from __future__ import annotations

import logging

from packer import comment as comment_mod
from packer.dispatch import QueuedJob, whole_gpu_back
from packer.request import gres_text
from slurm_plugin.helper.slurm_poll import node_gpus
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.tracks import job_gpu_type, job_shards
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)

KIND = "restore-whole"
REASON = "whole-gpu-at-dispatch"


def _queued(job: Job, packed: bool) -> QueuedJob | None:
    """The job as the rule sees it; None for a job that asks for no GPU or is not one node's."""
    gpus = sum(i.count for i in job.gres if i.name == "gpu" and i.per == "node")
    if not packed and not gpus:
        return None
    return QueuedJob(job.job_id, job.priority or 0, packed, gpus=1 if packed else gpus,
                     excluded=frozenset(job.excluded_nodes), required=frozenset(job.required_nodes))


class DispatchWatch:
    name = "dispatch"

    def __init__(self) -> None:
        self.done: set[int] = set()  # jobs restored (or tried): once per job
        self.ran: set[int] = set()  # jobs seen running: a requeued one is not at a first turn

    def round(self, ctx: RoundContext) -> None:
        mode = ctx.actions.mode_of(KIND)
        if mode.mode == "off" or not ctx.config.pack_only_when_no_idle_gpu:
            return  # an admin who packs with GPUs idle asked for packs, whatever is idle
        pending, moved = first_turns(ctx, self.ran)
        ours = {j.job_id for j in pending if job_shards(j) is not None and self._packed_by_us(j)
                and not j.restart_cnt and j.job_id not in moved}
        if not ours - self.done:
            self.done &= {j.job_id for j in pending}
            return
        idle = idle_whole_gpus(ctx)
        if idle is None:
            return
        queue = [q for j in pending if (q := _queued(j, j.job_id in ours)) is not None]
        for job_id, node in whole_gpu_back(queue, idle):
            if job_id in self.done:
                continue
            self.done.add(job_id)
            self._restore(ctx, ctx.jobs[job_id], node, mode.acts, mode.label)

    @staticmethod
    def _packed_by_us(job: Job) -> bool:
        """Packed at submit: a record `packed` with no reason (a watch's resize gives one)."""
        record = comment_mod.parse(job.admin_comment)
        return record is not None and record.applied_verdict == "packed" and record.reason is None

    def _restore(self, ctx: RoundContext, job: Job, node: str, acts: bool, label: str) -> None:
        gpu_type = job_gpu_type(job)
        whole = _whole_request(ctx, gpu_type)
        shards = job_shards(job)
        record = comment_mod.parse(job.admin_comment)
        line = comment_mod.render("exclusive", reason=REASON, fp=record.fingerprint if record else None)
        why = f"its turn came with a whole GPU idle on {node}: shard:{shards} -> {whole}"
        if not acts:
            ctx.actions.log_event(KIND, f"would give it its whole GPU back ({label} mode): {why}", job.job_id,
                                  shadow=True, node=node, from_shards=shards, to=whole)
            return
        try:
            ctx.actions.update_job(job.job_id, Gres=whole, AdminComment=comment_mod.merge(job.admin_comment, line))
        except SlurmError as exc:
            ctx.actions.log_event(KIND + "-failed", f"could not restore its request ({exc}); it starts on "
                                  f"shard:{shards}", job.job_id, to=whole)
            log.info("job %d: whole GPU not given back: %s", job.job_id, exc)
            return
        ctx.actions.log_event(KIND, f"whole GPU given back: {why}", job.job_id, node=node,
                              from_shards=shards, to=whole)
        log.info("job %d: %s", job.job_id, why)


def first_turns(ctx: RoundContext, ran: set[int]) -> tuple[list[Job], set[int]]:
    """(the pending jobs not held, the jobs among them not at a first turn); `ran` (the watch's
    own: jobs seen not pending) is brought up to date. A job requeued (by a watch: regrouped,
    grown, restarted for memory, or by anyone) is sized and placed by what requeued it: only a
    first run is decided again at dispatch."""
    ran |= {j.job_id for j in ctx.jobs.values() if j.state != "PENDING"}
    ran &= set(ctx.jobs)
    pending = [j for j in ctx.jobs.values() if j.state == "PENDING" and not j.held]
    return pending, ran | set(ctx.state.heading) | set(ctx.state.kept_off) | set(ctx.state.held_for_grower)


def idle_whole_gpus(ctx: RoundContext) -> dict[str, int] | None:
    """Idle whole GPUs per node, from Slurm's node list; None when it cannot be read (no
    dispatch decision this round)."""
    try:
        nodes = ctx.actions.runner.nodes()
    except SlurmError as exc:
        log.info("no node list (%s): no dispatch decision this round", exc)
        return None
    return {n.name: node_gpus(n).idle for n in nodes}


def _whole_request(ctx: RoundContext, gpu_type: str | None) -> str:
    try:
        replaces = ctx.actions.runner.version().replaces_gres_on_update
    except SlurmError:
        replaces = False  # every share of the GPU works on every release
    if replaces:
        return gres_text("gpu", 1, gpu_type)
    return gres_text("shard", ctx.config.shares_per_gpu, gpu_type)
