"""Requeued jobs stay the next to start: above every pending job, past Slurm's requeue delay."""
from __future__ import annotations

import logging

from packer.preemption import head_priority
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.slurm.errors import SlurmError

log = logging.getLogger(__name__)


class KeepAtHeadWatch:
    name = "keep-at-head"

    def round(self, ctx: RoundContext) -> None:
        self._keep_at_head(ctx, skip=ctx.acted)

    def _keep_at_head(self, ctx: RoundContext, skip: set[int] = frozenset()) -> None:
        """Requeued jobs: skip the requeue delay once safe, stay above every pending job.

        `skip`: jobs requeued in this round (`jobs` still shows them as they were before)."""
        jobs = ctx.jobs
        heading = ctx.state.heading
        pending = [j.priority for j in jobs.values() if j.state == "PENDING"]
        for job_id, given in list(heading.items()):
            if job_id in skip:
                continue
            job = jobs.get(job_id)
            if job is None or job.state != "PENDING":
                # COMPLETING: the old run is still being cleaned up; wait for it
                if job is None or job.state in ("RUNNING", "SUSPENDED", "CONFIGURING") or job.is_finished:
                    heading.pop(job_id, None)
                continue
            try:
                wanted = head_priority([p for p in pending if p != job.priority], exclude_current=job.priority)
                if job.priority is not None and wanted > job.priority:
                    ctx.actions.update_job(job_id, Priority=wanted)
                    heading[job_id] = wanted
                if ctx.settings.skip_requeue_delay and job.state_reason == "BeginTime":
                    # the old run is no longer COMPLETING: its launch credential cannot start anything
                    ctx.actions.update_job(job_id, StartTime="now")
            except SlurmError as exc:
                log.info("job %d: could not keep it at the head: %s", job_id, exc)
