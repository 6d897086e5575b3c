"""Steering: pending packed jobs get the nodes of their avoided partners (and of 22.05
collisions, and the nodes a watch keeps them off: `WatchState.kept_off`) in `ExcNodeList`,
the user's own exclusions kept.

With `[monitor] pair_predict` (default on) a pending packed job is also kept off a node where
the co-runner rule (`ctx.rules.corunners`, what the simulator's colocate packs by) finds no
GPU for it: every GPU it could land on is busy with packed jobs, and a job there is predicted
to keep under `1 - contention_threshold` of its speed beside it (`packer.placement.slow_nodes`;
pair speeds measured by the contention watch, else the feature model on both jobs' history:
`pair_view`). A node with a free GPU or a qualifying one stays allowed; never every GPU node
(Slurm would refuse it: the job then goes where Slurm puts it, and the contention
watch judges the pack).

A pending packed job is also kept off a node whose every GPU is at the jobs-per-GPU limit or
would go past the cap on its total memory with it (`[monitor] max_jobs_per_gpu`, `[packer]
max_gpu_fraction`: the replay's limits; Slurm's shard count alone allows 8 of 8 shares), with
or without pair prediction.

A pending packed job is also kept off the nodes whose agent's figures are stale
(`ctx.stale_nodes`), unless that is every node; the exclusion goes when the node is fresh."""
from __future__ import annotations

import logging

from packer import comment as comment_mod
from packer.corunner import GpuLoad, Newcomer, Ranked
from packer.placement import NodeGpus, Running, avoid_nodes, merge_exclusions, slow_nodes
from slurm_plugin.helper.submit_admission import pair_predictor_of
from slurm_plugin.helper.watches.pair_view import node_gpus
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.tracks import ACTIVE, job_shards, submit_time_exclusion
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.gres import expand_hostlist
from slurm_plugin.slurm.model import Job

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
        # the pending jobs steered: packed ones, and those a 22.05 collision keeps off a node (each
        # job's shards read once: at 50,000 queued jobs every walk of the queue shows in the round)
        steered = [(j, shards) for j, shards in ((j, job_shards(j)) for j in jobs.values() if j.state == "PENDING")
                   if shards is not None or j.job_id in quirk_excluded]
        pending_packed = [j for j, shards in steered if shards is not None and ctx.fingerprint_of(j)]
        # one query for the partners of every pending packed job, not one per job
        partners_of = store.pairs.avoided_with_each(ctx.fingerprint_of(j) or "" for j in pending_packed)
        predicted = self._predicted_off(ctx, pending_packed)
        stale = set(ctx.stale_nodes)
        every_node = _known_nodes(ctx) if stale else set()
        # highest priority first: an update can start a job at once (Slurm schedules on it,
        # 26.05 seen), so a lifted exclusion lands first for the job Slurm would start first
        for job, shards in sorted(steered, key=lambda js: (-(js[0].priority or 0), js[0].job_id)):
            want: set[str] = set(ctx.state.kept_off.get(job.job_id, ()))
            fp = ctx.fingerprint_of(job)
            if shards is not None and fp:
                partners = partners_of[fp]
                want |= avoid_nodes(fp, running, lambda _me, other: other in partners)
            why = predicted.get(job.job_id, {})
            want |= set(why)
            if stale and shards is not None and not job.required_nodes and not every_node <= want | stale:
                why = {**why, **{n: "(its agent's figures are stale)" for n in sorted(stale - want)}}
                want |= stale  # nothing is packed where nobody can watch it
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
                    because = "".join(f"; {node} {reason}" for node, reason in sorted(why.items()))
                    store.log_event("steer", f"excluded nodes now {sorted(want) or 'none'} "
                                    f"(avoided partners / GPU collisions / predicted slowdown{because})",
                                    job.job_id, excluded=sorted(want), predicted=why)
            except SlurmError as exc:
                log.info("job %d: could not set its excluded nodes: %s", job.job_id, exc)
        for job_id in list(ours_excluded):
            if job_id not in jobs or jobs[job_id].is_finished:
                ours_excluded.pop(job_id, None)
        for job_id in list(ctx.state.kept_off):
            job = jobs.get(job_id)
            if job is None or job.is_finished or (job.state == "RUNNING" and job_id not in ctx.acted):
                ctx.state.kept_off.pop(job_id, None)  # started again (or gone): the pin has done its work

    def _predicted_off(self, ctx: RoundContext, pending: list[Job]) -> dict[int, dict[str, str]]:
        """Per pending packed job, the nodes the pair prediction keeps it off, with why."""
        packed_running = [j for j in ctx.jobs.values() if j.state == "RUNNING" and job_shards(j) is not None]
        if not pending or not packed_running:
            return {}
        try:
            nodes = ctx.actions.runner.nodes()
        except SlurmError as exc:
            log.warning("no node list (%s): no steering by pair prediction this round", exc)
            return {}
        fps = {fp for j in (*pending, *packed_running) if (fp := ctx.fingerprint_of(j))}
        store, config = ctx.actions.store, ctx.config
        utils = {f: e.mean_util_pct for f, e in store.estimates(fps, config.history_window).items()}
        gpus = [NodeGpus(name, loads) for name, loads in
                node_gpus(nodes, packed_running, config, ctx.fingerprint_of, utils).items()]
        gpu_nodes = {n.name for n in nodes if n.gpus_total}
        # the submit path's pair model: a measured pair as measured, any other judged at its
        # upper bound (it is kept off only where the model is sure it is slow); a pair of a
        # workload with no history, or pair_predict off, is no reason to keep a node off
        predictor = pair_predictor_of(store, ctx.rules, fps, config.history_since(ctx.now)) \
            if ctx.settings.pair_predict else None

        def speed(a: str, b: str) -> float:
            s = predictor.trial_speed(a, b) if predictor is not None else None
            return 1.0 if s is None else s
        limits = (ctx.rules.max_jobs_per_gpu, ctx.config.max_gpu_fraction)
        # the watches keep the per-job slowdown bound (the admin's fairness setting,
        # contention_threshold) whatever the submit path's admission: the contention watch requeues by it
        rules = ctx.rules.with_overrides(admission="slowdown-bound")

        def rank(new: Newcomer, loads: list[GpuLoad] | tuple[GpuLoad, ...]) -> list[Ranked]:
            return rules.corunners(new, loads, pair_speed=speed)

        out: dict[int, dict[str, str]] = {}
        memo: dict[tuple[str, int], dict[str, str]] = {}  # the same workload and size: the same nodes
        for job in pending:
            if job.required_nodes:  # pinned with -w: excluding a node it requires would refuse it
                continue
            fp, shards = ctx.fingerprint_of(job) or "", job_shards(job) or 0
            slow = memo.get((fp, shards))
            if slow is None:
                new = Newcomer(str(job.job_id), fp, int(shards * config.share_bytes), utils.get(fp))
                slow = memo[(fp, shards)] = slow_nodes(new, gpus, rank, speed, 1.0 - rules.contention_threshold,
                                                       limits)
            if not slow:
                continue
            if gpu_nodes and gpu_nodes <= set(slow):
                log.info("job %d: every GPU node is predicted slow for it (%s); not excluded",
                         job.job_id, "; ".join(f"{n} {r}" for n, r in sorted(slow.items())))
                continue
            out[job.job_id] = {node: f"({reason})" for node, reason in slow.items()}
        return out


def _known_nodes(ctx: RoundContext) -> set[str]:
    """Every node with an agent (the link's), else every node a job names."""
    known = getattr(getattr(ctx.agents, "directory", None), "nodes", None)
    if known is not None:
        return set(known())
    return {n for j in ctx.jobs.values() if j.nodes for n in expand_hostlist(j.nodes)}
