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

from typing import TYPE_CHECKING, Protocol

from mig.catalog import Catalog
from mig.fsm import Placement
from simulator.memory import mem_now
from simulator.mig_state import MigState
from simulator.pair_failure import PairFailures
from simulator.progress import Progress
from simulator.releases import ReleaseIndex
from simulator.sharing import ShareIndex, shared_rates
from simulator.state import Gpu, Job
from simulator.usage import UsageMeter
from simulator.workload import PairTable

if TYPE_CHECKING:
    from simulator.scheduling import Backfill


class IdleGate(Protocol):
    """The scheduler's side: may a job take idle GPUs now (the head's reservation), and
    the mark that something a pass looks at changed."""

    dirty: bool

    def may_take_idle(self, job: Job, now: float, bf: "Backfill | None", n: int) -> bool: ...


class SharingHooks(Protocol):
    """The policy's own indexes and watches: a job joined a GPU, or left one."""

    def joined(self, g: Gpu, job: Job, now: float, was_busy: bool) -> None: ...

    def left(self, g: Gpu) -> None: ...


class Cluster:
    def __init__(self, *, gpus: list[Gpu], idle: dict[int, None], gpu_mem: int, catalog: Catalog, pairs: PairTable,
                 sched: IdleGate, progress: Progress, shares: ShareIndex, releases: ReleaseIndex,
                 usage: UsageMeter, mig: MigState | None, pair_failures: PairFailures):
        """``gpus`` and ``idle`` (GPU ids, in the order freed) are the run's own, kept up to date
        here; the policy's hooks come with `attach` (the policy is given this cluster)."""
        self.gpus, self.idle = gpus, idle
        self.gpu_mem, self.catalog, self.pairs = gpu_mem, catalog, pairs
        self.sched, self.progress, self.shares = sched, progress, shares
        self.releases, self.usage, self.mig, self.pair_failures = releases, usage, mig, pair_failures
        self.policy: SharingHooks

    def attach(self, policy: SharingHooks) -> None:
        self.policy = policy

    def start_idle(self, job: Job, now: float, bf: "Backfill | None", shared: bool = False,
                   shards: int | None = None) -> bool:
        """Start one-GPU ``job`` on the first idle GPU, if the backfill allows it."""
        if not self.idle or not self.sched.may_take_idle(job, now, bf, 1):
            return False
        gid = next(iter(self.idle))
        if shared:
            self.start_shared(job, self.gpus[gid], now, self.gpu_mem, shards)
        else:
            self.start_whole(job, [gid], now)
        return True

    def start_whole(self, job: Job, gids: list[int], now: float) -> None:
        mig = self.mig
        for gid in gids:
            g = self.gpus[gid]
            del self.idle[gid]
            if mig and g.inst:
                mig.clear_idle_instances(g)
            if mig and not g.static:
                mig.set_free(g, None)
            g.whole = True
            g.jobs.append(job)
            self.usage.gpu_changed(g, was_busy=False)
        job.gpu_ids = gids
        job.shards = None
        job.inst = None
        self.progress.begin(job, now, self.gpu_mem)
        self.progress.reschedule(job, now)

    def start_shared(self, job: Job, g: Gpu, now: float, cap: int, shards: int | None) -> None:
        was_busy = bool(g.jobs)
        if not was_busy:
            del self.idle[g.id]
        self.shares.remove(g)
        g.jobs.append(job)
        job.gpu_ids = [g.id]
        job.shards = shards
        job.inst = None
        self.progress.begin(job, now, cap)
        if was_busy:
            job.packed_at = now
        self.shares.add(g)
        self.rerate_shared(g, now)
        self.usage.gpu_changed(g, was_busy)
        self.policy.joined(g, job, now, was_busy)

    def rerate_shared(self, g: Gpu, now: float) -> None:
        """Each job's room (memory it can really get) and speed on shared GPU ``g``."""
        blind = len(g.jobs) > 1 and any(j.shards is None for j in g.jobs)
        if blind:  # no memory isolation: each job gets what its neighbours leave
            mem = {j.id: mem_now(j, now) for j in g.jobs}
            total = sum(mem.values())
            for j in g.jobs:
                j.room = min(j.cap, self.gpu_mem - (total - mem[j.id]))
        elif len(g.jobs) == 1:
            g.jobs[0].room = g.jobs[0].cap
        rates = shared_rates(g.jobs, self.pairs)
        self.pair_failures.arm(g, rates, now)  # a pair that cannot run together: the newest fails
        for j, rate, measured in rates:
            if measured and len(rates) > 1 and rate > 0.0:
                j.max_pair_slow = max(j.max_pair_slow, 1.0 / rate)
            self.progress.set_rate(j, now, rate)

    def start_instance(self, job: Job, g: Gpu, p: Placement, now: float) -> None:
        was_busy = g.busy > 0
        if not was_busy and not g.static:
            self.idle.pop(g.id, None)
        self.mig.occupy(g, p, job)
        g.jobs.append(job)
        job.gpu_ids = [g.id]
        job.inst = p
        job.shards = None
        catalog = self.catalog
        prof = catalog.profile(p.profile)
        self.progress.begin(job, now, prof.memory_mib << 20)
        frac = prof.compute_slices / catalog.compute_slices
        self.mig.refresh_free(g)
        self.progress.set_rate(job, now, min(1.0, frac / (job.util / 100.0)))
        self.usage.gpu_changed(g, was_busy)

    def release(self, job: Job, now: float) -> None:
        """Take ``job`` off its GPUs; the jobs left on a shared GPU are re-rated."""
        self.sched.dirty = True
        for gid in job.gpu_ids:
            g = self.gpus[gid]
            if g.inst and job.inst is not None:
                self.mig.vacate(g, job.inst)
                g.jobs.remove(job)
                self.releases.touch(g)
                if g.busy == 0 and not g.static:
                    self.idle[g.id] = None
                self.usage.gpu_changed(g, True)
                continue
            self.shares.remove(g)
            g.jobs.remove(job)
            self.releases.touch(g)
            if g.whole:
                g.whole = False
                if self.mig and not g.static:
                    self.mig.refresh_free(g)
            if not g.jobs:
                self.idle[g.id] = None
            else:
                self.shares.add(g)
                self.rerate_shared(g, now)
            self.usage.gpu_changed(g, True)
            self.policy.left(g)
        job.gpu_ids = []
