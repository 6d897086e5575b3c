"""Steering: pending packed jobs get the nodes of their avoided partners (and of 22.05
collisions, and the nodes a watch keeps them off: `WatchState.kept_off`) in `ExcNodeList`,
the user's own exclusions kept."""
from __future__ import annotations

import logging

from packer import comment as comment_mod
from packer.placement import Running, avoid_nodes, merge_exclusions
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.tracks import ACTIVE, job_shards, submit_time_exclusion
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.gres import expand_hostlist

log = logging.getLogger(__name__)


class SteerWatch:
    name = "steering"

    def round(self, ctx: RoundContext) -> None:
        self._steer_pending(ctx)

    def _steer_pending(self, ctx: RoundContext) -> None:
        if not ctx.enforcing:
            return
        jobs = ctx.jobs
        store = ctx.actions.store
        ours_excluded = ctx.state.ours_excluded
        quirk_excluded = ctx.state.quirk_excluded
        running = [
            Running(j.job_id, ctx.fingerprint_of(j), expand_hostlist(j.nodes), job_shards(j) is not None)
            for j in jobs.values() if j.state in ACTIVE
        ]
        active_ids = {j.job_id for j in jobs.values() if j.state in ACTIVE}
        # one query for the partners of every pending packed job, not one per job
        partners_of = store.avoided_with_each(
            fp for j in jobs.values()
            if j.state == "PENDING" and job_shards(j) is not None and (fp := ctx.fingerprint_of(j))
        )
        for job in jobs.values():
            if job.state != "PENDING":
                continue
            if job_shards(job) is None and job.job_id not in quirk_excluded:
                continue
            want: set[str] = set(ctx.state.kept_off.get(job.job_id, ()))
            fp = ctx.fingerprint_of(job)
            if job_shards(job) is not None and fp:
                partners = partners_of[fp]
                want |= avoid_nodes(fp, running, lambda _me, other: other in partners)
            quirk = quirk_excluded.get(job.job_id)
            if quirk is not None:
                node, keepers = quirk
                if keepers & active_ids:
                    want.add(node)
                else:
                    quirk_excluded.pop(job.job_id, None)
            before = ours_excluded.get(job.job_id)
            if before is None:  # what the submit path excluded is written in the job's record
                before = submit_time_exclusion(job.admin_comment)
            merged = merge_exclusions(job.excluded_nodes, before, want)
            if set(merged) == set(job.excluded_nodes) and frozenset(want) == before:
                continue
            # what we exclude is also written into the job's record (`avoid=`), so a restarted
            # helper still knows which exclusions are ours and lifts them when they are done
            update: dict = {"ExcNodeList": merged}
            comment = comment_mod.with_field(job.admin_comment, "avoid", ",".join(sorted(want)) or None)
            if comment is not None and comment != job.admin_comment:
                update["AdminComment"] = comment
            try:
                ctx.actions.update_job(job.job_id, **update)
                ours_excluded[job.job_id] = frozenset(want)
                if want != before:
                    store.log_event("steer", f"excluded nodes now {sorted(want) or 'none'} "
                                    f"(avoided partners / GPU collisions)", job.job_id, excluded=sorted(want))
            except SlurmError as exc:
                log.info("job %d: could not set its excluded nodes: %s", job.job_id, exc)
        for job_id in list(ours_excluded):
            if job_id not in jobs or jobs[job_id].is_finished:
                ours_excluded.pop(job_id, None)
        for job_id in list(ctx.state.kept_off):
            job = jobs.get(job_id)
            if job is None or job.is_finished or (job.state == "RUNNING" and job_id not in ctx.acted):
                ctx.state.kept_off.pop(job_id, None)  # started again (or gone): the pin has done its work
