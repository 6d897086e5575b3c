"""Requeued jobs stay the next to start: above every pending job, past Slurm's requeue delay;
their lift ends when they start (`watches/head_lift.py`; `packer.preemption.lift_turn` says
what each lift needs). The lifts are kept in the store (`store.lifts`): after a restart of the
helper they still end."""
from __future__ import annotations

import logging

from packer.preemption import END, FORGET, WAIT, lift_turn
from slurm_plugin.helper.watches.head_lift import end_lift, lift
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.slurm.errors import SlurmError

log = logging.getLogger(__name__)


class KeepAtHeadWatch:
    name = "keep-at-head"

    def round(self, ctx: RoundContext) -> None:
        self._keep_at_head(ctx, skip=ctx.acted)

    def _keep_at_head(self, ctx: RoundContext, skip: set[int] = frozenset()) -> None:
        """Requeued jobs: skip the requeue delay once safe, stay above every pending job, and
        get their owner's nice back once they start.

        `skip`: jobs requeued in this round (`jobs` still shows them as they were before)."""
        jobs = ctx.jobs
        heading = ctx.state.heading
        for job_id, lifted in list(heading.items()):
            if job_id in skip:
                continue
            job = jobs.get(job_id)
            state = None if job is None or job.is_finished else job.state
            turn = lift_turn(lifted, state, job.restart_cnt if job else None, job.priority if job else None)
            if turn == FORGET:  # Slurm changes a finished job no more
                heading.pop(job_id, None)
                continue
            if turn == END:
                end_lift(ctx.actions, job_id, lifted)
                heading.pop(job_id, None)
                continue
            if turn == WAIT:
                continue
            pending = [j.priority for j in jobs.values() if j.state == "PENDING" and j.job_id != job_id]
            try:
                heading[job_id], _ = lift(ctx.actions.runner, job_id, job.priority, lifted, pending)
                if ctx.settings.skip_requeue_delay and job.state_reason == "BeginTime":
                    # the old run is no longer COMPLETING: its launch credential cannot start anything
                    ctx.actions.update_job(job_id, StartTime="now")
            except SlurmError as exc:
                log.info("job %d: could not keep it at the head: %s", job_id, exc)
