"""The baselines as :class:`~simulator.policy.Policy` objects (one-GPU jobs;
the scheduler starts multi-GPU jobs on whole idle GPUs for every policy).

- ``exclusive``: a whole idle GPU;
- ``shard-fixed``: Slurm shards, a fixed number of jobs per GPU, blind to memory and
  speed (a GPU with free shares first, else an idle one);
- ``lucid-like``: Lucid's sharing labels: an idle GPU, else beside a job whose label sum
  stays within ``lucid_max_label_sum`` and whose memory fits.
"""
from __future__ import annotations


from simulator.late_scan import LateScan
from simulator.policy import Policy, PolicyHandles

from simulator.scheduling import Backfill
from simulator.state import Gpu, Job


class ExclusivePolicy(Policy):
    name = "exclusive"

    def place(self, job: Job, now: float, bf: Backfill | None) -> bool:
        return self.cluster.start_idle(job, now, bf)

    def may_place_busy(self) -> bool:
        return False


class ShardFixedPolicy(Policy):
    name = "shard-fixed"
    packs = True

    def __init__(self, h: PolicyHandles):
        super().__init__(h)
        self.partial: dict[int, None] = {}  # GPUs with free shares, in the order they got them

    def place(self, job: Job, now: float, bf: Backfill | None) -> bool:
        if job.remembered >= self.gpu_mem:  # failed for memory beside a job: alone now
            return self.cluster.start_idle(job, now, bf)
        if self.partial:
            g = self.gpus[next(iter(self.partial))]
            if self.sched.may_pack(job, now, bf, g):
                self.cluster.start_shared(job, g, now, self.gpu_mem, None)
                return True
        return self.cluster.start_idle(job, now, bf, shared=True)

    def may_place_busy(self) -> bool:
        return bool(self.partial)

    def joined(self, g: Gpu, job: Job, now: float, was_busy: bool) -> None:
        if len(g.jobs) < self.cfg.shard_jobs_per_gpu:
            self.partial[g.id] = None
            self.shares.opened += 1
        else:
            self.partial.pop(g.id, None)

    def left(self, g: Gpu) -> None:
        if not g.jobs:
            self.partial.pop(g.id, None)
        else:
            self.partial[g.id] = None
            self.shares.opened += 1


class LucidPolicy(Policy):
    name = "lucid-like"
    packs = True

    def __init__(self, h: PolicyHandles):
        super().__init__(h)
        self.late = LateScan(self.releases, self.shares)  # per kind: GPUs released after the reservation

    def place(self, job: Job, now: float, bf: Backfill | None) -> bool:
        if job.remembered >= self.gpu_mem:  # failed for memory beside a job: alone now
            return self.cluster.start_idle(job, now, bf)
        if self.idle:
            return self.cluster.start_idle(job, now, bf, shared=True)
        if job.label >= 2:
            return False
        ranked = []
        for (prof, held), gids in self.shares.single.items():
            p = self.profiles[prof]
            if p.label >= 2 or p.label + job.label > self.cfg.lucid_max_label_sum:
                continue
            if held + job.mem0 > self.gpu_mem:
                continue
            ranked.append(((p.label + job.label, p.util_pct, prof, held), (prof, held), gids))
        if not ranked:
            return False  # (the reservation is computed on first use: not here)
        ranked.sort(key=lambda r: r[0])
        free = bf is None or bf.pack_ok or now + job.duration <= bf.shadow
        for _, key, gids in ranked:  # the first GPU of the best kind the reservation allows
            if free:  # allowed everywhere: the first one
                gid = next(iter(gids))
            else:  # one the reservation does not count on (released after it): Scheduler.may_pack
                gid = self.late.first_late(key, gids, bf.shadow)
                if gid is None:
                    self.sched.denied = True
                    continue
            self.sched.denied = False
            self.cluster.start_shared(job, self.gpus[gid], now, self.gpu_mem, None)
            return True
        return False

    def may_place_busy(self) -> bool:
        return bool(self.shares.single) or bool(self.shares.multi)
