"""The baselines as :class:`~simulator.policy.Policy` objects (one-GPU jobs;
the scheduler starts multi-GPU jobs on whole idle GPUs for every policy).

- ``exclusive``: a whole idle GPU;
- ``shard-fixed``: Slurm shards, a fixed number of jobs per GPU, blind to memory and
  speed (a GPU with free shares first, else an idle one);
- ``lucid-like``: Lucid's sharing labels: an idle GPU, else beside a job whose label sum
  stays within ``lucid_max_label_sum`` and whose memory fits.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.policy import Policy

if TYPE_CHECKING:
    from simulator.engine import Simulator
    from simulator.scheduling import Backfill
    from simulator.state import Gpu, Job


class ExclusivePolicy(Policy):
    name = "exclusive"

    def place(self, job: Job, now: float, bf: Backfill | None) -> bool:
        return self.sim.cluster.start_idle(job, now, bf)

    def may_place_busy(self) -> bool:
        return False


class ShardFixedPolicy(Policy):
    name = "shard-fixed"
    packs = True

    def __init__(self, sim: "Simulator"):
        super().__init__(sim)
        self.partial: dict[int, None] = {}  # GPUs with free shares, in the order they got them

    def place(self, job: Job, now: float, bf: Backfill | None) -> bool:
        sim = self.sim
        if job.remembered >= sim.gpu_mem:  # failed for memory beside a job: alone now
            return sim.cluster.start_idle(job, now, bf)
        if self.partial:
            g = sim.gpus[next(iter(self.partial))]
            if sim.sched.may_pack(job, now, bf, g):
                sim.cluster.start_shared(job, g, now, sim.gpu_mem, None)
                return True
        return sim.cluster.start_idle(job, now, bf, shared=True)

    def may_place_busy(self) -> bool:
        return bool(self.partial)

    def joined(self, g: Gpu, job: Job, now: float, was_busy: bool) -> None:
        if len(g.jobs) < self.sim.cfg.shard_jobs_per_gpu:
            self.partial[g.id] = None
            self.sim.shares.opened += 1
        else:
            self.partial.pop(g.id, None)

    def left(self, g: Gpu) -> None:
        if not g.jobs:
            self.partial.pop(g.id, None)
        else:
            self.partial[g.id] = None
            self.sim.shares.opened += 1


class LucidPolicy(Policy):
    name = "lucid-like"
    packs = True

    def place(self, job: Job, now: float, bf: Backfill | None) -> bool:
        sim = self.sim
        if job.remembered >= sim.gpu_mem:  # failed for memory beside a job: alone now
            return sim.cluster.start_idle(job, now, bf)
        if sim.idle:
            return sim.cluster.start_idle(job, now, bf, shared=True)
        if job.label >= 2:
            return False
        ranked = []
        for (prof, held), gids in sim.shares.single.items():
            p = sim.profiles[prof]
            if p.label >= 2 or p.label + job.label > sim.cfg.lucid_max_label_sum:
                continue
            if held + job.mem0 > sim.gpu_mem:
                continue
            ranked.append(((p.label + job.label, p.util_pct, prof, held), gids))
        ranked.sort(key=lambda r: r[0])
        for _, gids in ranked:
            for gid in gids:  # the first GPU of the best kind the reservation allows
                g = sim.gpus[gid]
                if sim.sched.may_pack(job, now, bf, g):
                    sim.sched.denied = False
                    sim.cluster.start_shared(job, g, now, sim.gpu_mem, None)
                    return True
                if bf is None or bf.pack_ok or now + job.duration <= bf.shadow:
                    break  # allowed everywhere: only the first one matters
        return False

    def may_place_busy(self) -> bool:
        return bool(self.sim.shares.single) or bool(self.sim.shares.multi)
