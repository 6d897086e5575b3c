"""Putting jobs on GPUs and taking them off: the cluster operations every policy shares.

- :meth:`Cluster.start_whole`: a job holds whole GPUs (multi-GPU jobs, exclusive);
- :meth:`Cluster.start_shared`: a one-GPU job on a GPU others may share (shard-fixed,
  lucid-like, colocate), with ``shards`` (memory isolated) or without (blind: each job
  gets the memory its neighbours leave); every job there is re-rated;
- :meth:`Cluster.start_instance`: a one-GPU job on a MIG instance;
- :meth:`Cluster.release`: a job leaves its GPUs (finished or stopped).

Each keeps the indexes up to date: idle GPUs, the release times, the share index, the MIG
state, the usage meter, and tells the policy (``joined``/``left``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from mig.fsm import Placement
from simulator.memory import mem_now
from simulator.sharing import shared_rates
from simulator.state import Gpu, Job

if TYPE_CHECKING:
    from simulator.engine import Simulator
    from simulator.scheduling import Backfill


class Cluster:
    def __init__(self, sim: "Simulator", n_gpus: int):
        self.sim = sim
        self.gpus = [Gpu(i) for i in range(n_gpus)]
        self.idle: dict[int, None] = {i: None for i in range(n_gpus)}  # in the order freed

    def start_idle(self, job: Job, now: float, bf: "Backfill | None", shared: bool = False,
                   shards: int | None = None) -> bool:
        """Start one-GPU ``job`` on the first idle GPU, if the backfill allows it."""
        sim = self.sim
        if not self.idle or not sim.sched.may_take_idle(job, now, bf, 1):
            return False
        gid = next(iter(self.idle))
        if shared:
            self.start_shared(job, self.gpus[gid], now, sim.gpu_mem, shards)
        else:
            self.start_whole(job, [gid], now)
        return True

    def start_whole(self, job: Job, gids: list[int], now: float) -> None:
        sim = self.sim
        mig = sim.mig
        for gid in gids:
            g = self.gpus[gid]
            del self.idle[gid]
            if mig and g.inst:
                mig.clear_idle_instances(g)
            if mig and not g.static:
                mig.set_free(g, None)
            g.whole = True
            g.jobs.append(job)
            sim.usage.gpu_changed(g, was_busy=False)
        job.gpu_ids = gids
        job.shards = None
        job.inst = None
        sim.progress.begin(job, now, sim.gpu_mem)
        sim.progress.reschedule(job, now)

    def start_shared(self, job: Job, g: Gpu, now: float, cap: int, shards: int | None) -> None:
        sim = self.sim
        was_busy = bool(g.jobs)
        if not was_busy:
            del self.idle[g.id]
        sim.shares.remove(g)
        g.jobs.append(job)
        job.gpu_ids = [g.id]
        job.shards = shards
        job.inst = None
        sim.progress.begin(job, now, cap)
        if was_busy:
            job.packed_at = now
        sim.shares.add(g)
        self.rerate_shared(g, now)
        sim.usage.gpu_changed(g, was_busy)
        sim.policy.joined(g, job, now, was_busy)

    def rerate_shared(self, g: Gpu, now: float) -> None:
        """Each job's room (memory it can really get) and speed on shared GPU ``g``."""
        sim = self.sim
        blind = len(g.jobs) > 1 and any(j.shards is None for j in g.jobs)
        if blind:  # no memory isolation: each job gets what its neighbours leave
            mem = {j.id: mem_now(j, now) for j in g.jobs}
            total = sum(mem.values())
            for j in g.jobs:
                j.room = min(j.cap, sim.gpu_mem - (total - mem[j.id]))
        elif len(g.jobs) == 1:
            g.jobs[0].room = g.jobs[0].cap
        rates = shared_rates(g.jobs, sim.pairs)
        sim.pair_failures.arm(g, rates, now)  # a pair that cannot run together: the newest fails
        for j, rate, measured in rates:
            if measured and len(rates) > 1 and rate > 0.0:
                j.max_pair_slow = max(j.max_pair_slow, 1.0 / rate)
            sim.progress.set_rate(j, now, rate)

    def start_instance(self, job: Job, g: Gpu, p: Placement, now: float) -> None:
        sim = self.sim
        was_busy = g.busy > 0
        if not was_busy and not g.static:
            self.idle.pop(g.id, None)
        sim.mig.occupy(g, p, job)
        g.jobs.append(job)
        job.gpu_ids = [g.id]
        job.inst = p
        job.shards = None
        catalog = sim.catalog
        prof = catalog.profile(p.profile)
        sim.progress.begin(job, now, prof.memory_mib << 20)
        frac = prof.compute_slices / catalog.compute_slices
        sim.mig.refresh_free(g)
        sim.progress.set_rate(job, now, min(1.0, frac / (job.util / 100.0)))
        sim.usage.gpu_changed(g, was_busy)

    def release(self, job: Job, now: float) -> None:
        """Take ``job`` off its GPUs; the jobs left on a shared GPU are re-rated."""
        sim = self.sim
        sim.sched.dirty = True
        for gid in job.gpu_ids:
            g = self.gpus[gid]
            if g.inst and job.inst is not None:
                sim.mig.vacate(g, job.inst)
                g.jobs.remove(job)
                sim.releases.touch(g)
                if g.busy == 0 and not g.static:
                    self.idle[g.id] = None
                sim.usage.gpu_changed(g, True)
                continue
            sim.shares.remove(g)
            g.jobs.remove(job)
            sim.releases.touch(g)
            if g.whole:
                g.whole = False
                if sim.mig and not g.static:
                    sim.mig.refresh_free(g)
            if not g.jobs:
                self.idle[g.id] = None
            else:
                sim.shares.add(g)
                self.rerate_shared(g, now)
            sim.usage.gpu_changed(g, True)
            sim.policy.left(g)
        job.gpu_ids = []
