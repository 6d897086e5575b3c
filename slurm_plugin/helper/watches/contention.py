"""Contention (patent seed, FIG. 4): a newcomer that slows a job already on its GPU.

Per shared GPU, `packer.preemption.find_contention` (through `ctx.rules.contention`); the
newcomer is requeued at the head of the queue and each (newcomer, hurt job) pair of
fingerprints is recorded so they are never packed together again.
"""
from __future__ import annotations

from packer.preemption import Resident
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.tracks import Track
from slurm_plugin.slurm.gres import expand_hostlist

KIND = "requeue-contention"


class ContentionWatch:
    name = "contention"

    def round(self, ctx: RoundContext) -> None:
        if ctx.actions.mode_of(KIND).mode != "off":
            ctx.acted |= self._check_contention(ctx, ctx.acted)

    def _check_contention(self, ctx: RoundContext, skip: set[int]) -> set[int]:
        jobs = ctx.jobs
        by_gpu: dict[tuple[str, int], list[Track]] = {}
        for t in ctx.tracks.values():
            job = jobs.get(t.job_id)
            if job is None or job.state != "RUNNING" or not t.packed or t.job_id in skip or t.gpu_index < 0:
                continue
            by_gpu.setdefault((t.node, t.gpu_index), []).append(t)
        acted: set[int] = set()
        rules = ctx.rules
        actions = ctx.actions
        mode = actions.mode_of(KIND)
        for (node, gpu), tracks in sorted(by_gpu.items()):
            # a job's reported throughput is preferred; without it, its utilisation as the
            # GPU's counters measured it
            residents = [Resident(t.job_id, t.started_at, t.throughput(), t.fingerprint,
                                  utilisation=tuple((x.at, x.util_pct) for x in t.samples if x.counted))
                         for t in tracks]
            verdict = rules.contention(residents)
            if verdict is None:
                continue
            newcomer = jobs[verdict.newcomer]
            started_at = ctx.tracks[newcomer.job_id].started_at
            if not actions.first_report(newcomer.job_id, started_at):
                continue
            for hurt in verdict.hurt:
                # two copies of one workload that slow each other are a pair too (fp, fp): without
                # it, each next copy lands beside the running one and is requeued again
                if mode.acts and verdict.newcomer_fingerprint and hurt.fingerprint:
                    actions.store.avoid_pair(verdict.newcomer_fingerprint, hurt.fingerprint, verdict.reason)
            hurt_nodes = frozenset(n for h in verdict.hurt for n in expand_hostlist(jobs[h.job_id].nodes))
            evidence = {
                "node": node, "gpu": gpu, "threshold": rules.contention_threshold, "settle_s": rules.settle_s,
                "min_after": rules.min_samples_after,
                "hurt": [{"job_id": h.job_id, "before": h.before, "after": h.after, "loss": h.loss, "signal": h.signal}
                         for h in verdict.hurt],
            }
            if actions.decide(
                KIND, newcomer, verdict.reason, run_start=started_at, evidence=evidence, at=ctx.now, mode=mode,
                exclude=hurt_nodes, node=node, gpu=gpu, hurt=[h.job_id for h in verdict.hurt],
                fingerprint=verdict.newcomer_fingerprint,
                avoided=[h.fingerprint for h in verdict.hurt], signals=[h.signal for h in verdict.hurt],
            ):
                acted.add(newcomer.job_id)
        return acted
