"""Packed jobs whose isolation failed: never run unisolated, requeued at the head with the reason.

A packed step (it holds shards: it shares its GPU with other jobs) whose node agent is down or
refuses does not start: the SPANK plugin ends its task with :data:`UNISOLATED_EXIT` before the
program runs, and slurm.conf's ``RequeueExit=117`` has Slurm requeue the batch job (a failing
node Prolog would drain the node; this does not). This watch finds each such requeue (a pending
job whose last run exited with that code), says why in a ``requeue-unisolated`` event, once per
run, and lifts the job above every pending one with a nice (the keep-at-head watch keeps it there and ends the lift when it starts). A job whose
whole GPUs could not be isolated runs as Slurm gave them (fails open) and is not seen here.
"""
from __future__ import annotations

import logging

from slurm_plugin.helper.watches.head_lift import lift, lift_of
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)

#: the exit code of a packed task the SPANK plugin did not let start (spank/gpupack_spank.c
#: GPUPACK_UNISOLATED_EXIT; slurm.conf RequeueExit=)
UNISOLATED_EXIT = 117
KIND = "requeue-unisolated"


def requeued_unisolated(job: Job) -> bool:
    """Slurm requeued `job` because its packed step could not be isolated."""
    return job.state == "PENDING" and job.exit_code == UNISOLATED_EXIT and bool(job.restart_cnt)


class UnisolatedWatch:
    name = "unisolated"

    def __init__(self) -> None:
        self.told: set[tuple[int, int]] = set()  # (job, restart count) already explained

    def job_maps(self) -> list:
        return [self.told]

    def round(self, ctx: RoundContext) -> None:
        for job in ctx.jobs.values():
            if not requeued_unisolated(job) or (job.job_id, job.restart_cnt or 0) in self.told:
                continue
            self.told.add((job.job_id, job.restart_cnt or 0))
            reason = (f"its packed step could not be isolated on its node (the agent was down or refused; "
                      f"the node's slurmd log says which): it did not start beside other jobs (exit "
                      f"{UNISOLATED_EXIT}), Slurm requeued it (RequeueExit), restart {job.restart_cnt}")
            priority = None
            if ctx.enforcing and not ctx.actions.halted:
                try:
                    runner = ctx.actions.runner
                    lifted = lift_of(runner, ctx.state.heading, job.job_id, job.restart_cnt)
                    others = [j.priority for j in ctx.jobs.values() if j.state == "PENDING" and j.job_id != job.job_id]
                    lifted, priority = lift(runner, job.job_id, job.priority or 0, lifted, others)
                    ctx.state.heading[job.job_id] = lifted  # the keep-at-head watch ends the lift when it starts
                except SlurmError as exc:
                    log.error("job %d: not put at the head after its unisolated requeue: %s", job.job_id, exc)
                    priority = None
            where = f"; at the head of the queue (priority {priority}, lifted by an administrator nice)" if priority is not None else ""
            ctx.actions.log_event(KIND, reason + where, job.job_id, exit_code=UNISOLATED_EXIT,
                                  restarts=job.restart_cnt, priority=priority)
            log.warning("job %d: %s%s", job.job_id, reason, where)
