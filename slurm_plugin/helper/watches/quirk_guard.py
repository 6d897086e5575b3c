"""The Slurm 22.05 guard: one GPU given whole to a job and as shares to another."""
from __future__ import annotations

import logging

from packer.placement import gpu_holders, quirk_collisions
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.gres import expand_hostlist

log = logging.getLogger(__name__)


class QuirkGuardWatch:
    """Slurm 22.05.8 can give one GPU to a job as `gres/gpu` and shares of it to another
    (fixed upstream in 23.11.5). Slurm alone knows which GPU index it picked inside a
    node, and the helper cannot choose it for Slurm, so a hold on pending jobs could
    only act on whole nodes and would either starve packing (every node with a busy
    GPU) or not prevent anything. The guard is therefore exact and after the fact:
    each round it reads the allocations (`GRES=gpu(IDX:0)`, `shard(IDX:0)`) of running
    jobs; where one GPU index has both, the job that arrived last is requeued at the
    head (nothing lost, nothing cancelled) and kept off that node (`ExcNodeList`)
    while the jobs that were there first still run, so it cannot land on the same GPU
    again. The node agent's own check (it refuses to isolate a step on a GPU held
    whole) closes the window of the first round."""

    name = "quirk-guard"

    def enabled(self, ctx: RoundContext) -> bool:
        """As configured, or (auto) where Slurm needs it."""
        setting = ctx.settings.quirk_guard
        if setting == "auto":
            try:
                return ctx.actions.runner.version().double_books_shared_gpus
            except SlurmError:
                return True
        return bool(setting)

    def round(self, ctx: RoundContext) -> None:
        if self.enabled(ctx):
            ctx.acted |= self._guard_gpu_shard_collisions(ctx)

    def _guard_gpu_shard_collisions(self, ctx: RoundContext) -> set[int]:
        allocations = []
        for job in ctx.jobs.values():
            if job.state not in ("RUNNING", "CONFIGURING"):
                continue
            started = job.start_time.timestamp() if job.start_time else 0.0
            for host, item in zip(expand_hostlist(job.nodes), job.gres_detail):
                if item.name in ("gpu", "shard") and item.indexes:
                    allocations.append((job.job_id, started, host, item.name, item.indexes))
        acted: set[int] = set()
        for collision in quirk_collisions(gpu_holders(allocations)):
            if collision.requeue in acted:
                continue
            job = ctx.jobs[collision.requeue]
            ctx.state.quirk_excluded[job.job_id] = (collision.node, frozenset(collision.keep))
            if ctx.actions.requeue_at_head(job, "requeue-quirk", collision.reason, exclude=frozenset({collision.node}),
                                           node=collision.node, gpu=collision.index, keep=list(collision.keep)):
                acted.add(job.job_id)
        return acted
