"""Discrete-event replay of a job trace on a cluster of N GPUs, under one policy.

Queueing is Slurm's FIFO with EASY backfill: the first job of the queue starts if it can;
when it cannot, it gets a reservation (the time enough whole GPUs will be free, from the
running jobs' remaining times) and up to ``bf_depth`` later jobs may start if they do not
delay it (they end before the reservation, or use GPUs it does not need). Run-time
estimates are exact (Slurm uses time limits; a trace has none). A requeued job goes to the
head of the queue.

Structure: this class is the event loop and the cluster state (GPUs, queue, reservation,
indexes of GPUs by what runs on them); each policy's one-GPU start rule is a small policy object with
``start(job, now, reservation) -> bool`` (:mod:`~slurm_plugin.simulator.baselines`,
:mod:`~slurm_plugin.simulator.colocate` (also ``check``, FIG. 4),
:mod:`~slurm_plugin.simulator.mig_policies`) the loop calls; the cluster operations they
share (start on an idle GPU, share a GPU, create an instance) stay here.

The decisions are the suite's own code, called as in production:
``packer.decision.decide`` (exclusive or packed, and how many shares),
``packer.corunner.choose_corunner`` (FIG. 3 co-runner), ``packer.contention.check_contention``
(FIG. 4 requeue and pair avoidance), ``mig.fsm``/``mig.policies.choose``/``mig.planner.plan_merge_split``/
``mig.layout.homogeneous_layout`` (MIG placement, merge/split, homogeneous layouts) and
``predictor.forecast.Forecaster`` (early restart before an out-of-memory).

colocate (FIG. 3/4 of the patent seed): a one-GPU job runs alone while a GPU it may use is
idle (idle GPUs kept for the head's reservation do not count); otherwise it is packed as K
shares (``decide``) beside a job running alone, chosen by ``choose_corunner``. With
``pair_predict`` (default) the pack's slowdown is predicted from the measured pair speeds
(an unmeasured pair from the aggregate utilisation) before packing: only where the job
already there keeps at least 90 % of its speed (so FIG. 4 never has to requeue; it still
watches, for surprises), and ``best-pair`` takes the GPU with the most predicted throughput
together. The prediction uses the same pair table the replay slows jobs by, so in the
simulator it is exact; on a real cluster FIG. 4's requeue catches the misses. A pack under a
reservation is allowed when the newcomer ends before it and the job beside it still ends in
time, or when the GPU is not one the reservation counts on (its job ends after it anyway).

Speed: the busy GPUs' release times are kept sorted (the reservation is a look-up, not a
scan); a pass is skipped when nothing it reads changed since a pass that started nothing;
within a pass a job is not tried when one of the same shape no longer than it failed since
the last start that opened room. ``SimConfig(fast=False)`` runs the reference path (every
pass, every job) and gives identical results (tested).

A job's progress rate is its speed relative to running alone: 1 alone; the measured pair
speed when shared (see :mod:`slurm_plugin.simulator.workload`); on a MIG instance with a
fraction ``f`` of the compute, ``min(1, f / util)`` where ``util`` is its measured GPU
utilisation alone. A restart (out-of-memory, early restart, contention requeue) loses the
work of the attempt, as a Slurm requeue does.
"""
from __future__ import annotations

import logging
import time

from mig.catalog import Catalog, load_catalog
from mig.fsm import Placement
from packer.config import GIB, PackerConfig
from packer.decision import max_shards
from slurm_plugin.simulator.config import BASELINES, POLICIES, SimConfig
from slurm_plugin.simulator.events import CHECK as _CHECK, FINISH as _FINISH, OOM as _OOM, \
    WARN as _WARN, EventLoop
from slurm_plugin.simulator.growth import GrowPreemption
from slurm_plugin.simulator.knowledge import PairKnowledge
from slurm_plugin.simulator.mig_state import MigState
from slurm_plugin.simulator.regrouping import Regrouper
from slurm_plugin.simulator.registry import make_policy
from slurm_plugin.simulator.releases import ReleaseIndex
from slurm_plugin.simulator.result import SimResult
from slurm_plugin.simulator.scheduling import Backfill, Scheduler
from slurm_plugin.simulator.state import Gpu, Job
from slurm_plugin.simulator.usage import UsageMeter
from slurm_plugin.simulator.workload import PairTable, SimJobSpec, WorkloadProfile

log = logging.getLogger(__name__)

class Simulator:
    def __init__(self, cfg: SimConfig, specs: list[SimJobSpec], profiles: list[WorkloadProfile],
                 pairs: PairTable):
        self.cfg = cfg
        self.catalog: Catalog = load_catalog(cfg.gpu_model)
        self.gpu_mem = int(self.catalog.memory_mib) << 20
        self.pk = cfg.packer or PackerConfig(
            mode="enforce", gpu_memory_gib=self.gpu_mem / GIB,
            shares_per_gpu=self.catalog.memory_slices)
        if cfg.policy == "colocate" and cfg.pair_predict and cfg.packer is None:
            # the measured pair speeds judge a busy job's pack, not a utilisation cut-off
            self.pk = self.pk.with_overrides(max_util_pct=100.0)
        self.share_bytes = self.pk.share_bytes
        self.profiles = profiles
        self.pairs = pairs
        self.know = PairKnowledge(cfg.pair_knowledge, profiles, pairs)
        self.policy = make_policy(self)  # the one-GPU start rule and hooks the loop calls
        self.gpus = [Gpu(i) for i in range(cfg.gpus)]
        self.idle: dict[int, None] = {i: None for i in range(cfg.gpus)}
        self.loop = EventLoop()
        self.sched = Scheduler(self)  # the queue, passes and backfill tests
        self.releases = ReleaseIndex()  # when each busy GPU is released
        self.history: set[int] = set()  # profiles with a finished run (the packer's history)
        self.avoid: set[tuple[str, str]] = set()
        self.single: dict[tuple, dict[int, None]] = {}  # (profile, held) -> GPUs with one job
        # colocate, more than two per GPU: sorted ((profile, held), ...) -> GPUs with 2..max-1
        self.multi: dict[tuple, dict[int, None]] = {}
        self._multi_on = cfg.policy == "colocate" and cfg.max_jobs_per_gpu > 2
        self.usage = UsageMeter(cfg.timeline_step_s)
        self._warn_cache: dict[tuple, tuple[float | None, int | None]] = {}
        self._forecaster_cls = None
        self.skipped = 0
        self._opened = 0  # bumped when room appears for a job (a GPU with one job, free shares)
        self._single_ver = 0  # bumped when a (workload, size) group of one-job GPUs appears/goes
        # the MIG side of the cluster (MIG policies only)
        self.mig = MigState(cfg, self.catalog, self.gpus, self.idle) if self.policy.uses_mig else None
        n_whole = self.mig.n_whole if self.mig else cfg.gpus
        self.jobs: list[Job] = []
        for s in specs:
            if s.gpus > n_whole and (s.gpus > 1 or not (self.mig and self.mig.static_fits(s))):
                self.skipped += 1
                continue
            self.jobs.append(Job(s, profiles[s.profile]))
        self.grow = GrowPreemption(self) if cfg.grow_preempt else None
        self.regrouper = Regrouper(self) if cfg.regroup else None

    # ----------------------------------------------------------------- run
    def run(self) -> SimResult:
        t0 = time.perf_counter()
        arrivals = sorted(self.jobs, key=lambda j: (j.submit, j.id))
        handlers = {
            _FINISH: self._finish,
            _OOM: lambda job, t: self._restart_memory(job, t, predicted=False),
            _WARN: lambda job, t: self._restart_memory(job, t, predicted=True),
            _CHECK: self.policy.check,
        }
        self.loop.run(arrivals, self.usage.advance, handlers, self.sched.arrive, self.sched.run_pass)
        use = self.usage
        use.advance(use.last_t)
        makespan = max((j.end for j in self.jobs if j.end is not None), default=0.0)
        unfinished = [j for j in self.jobs if j.end is None]
        if unfinished:
            log.warning("%d jobs never ran (first: job %d needing %d GPUs)", len(unfinished),
                        unfinished[0].id, unfinished[0].gpus)
        return SimResult(
            policy=self.cfg.policy, predictor=self.cfg.predictor, config=self.cfg, jobs=self.jobs,
            skipped=self.skipped, makespan=makespan, busy_area=use.busy_area,
            util_area=use.util_area, mem_area=use.mem_area,
            mem_total=float(self.gpu_mem) * self.cfg.gpus,
            reconfig_creates=self.mig.creates if self.mig else 0,
            reconfig_destroys=self.mig.destroys if self.mig else 0,
            avoided_pairs=len(self.avoid), events=self.loop.events,
            wall_s=time.perf_counter() - t0, passes=self.sched.passes,
            passes_skipped=self.sched.passes_skipped, timeline=use.timeline,
            knowledge=self.policy.summary(), actions=self._actions_summary())

    def _actions_summary(self) -> dict:
        out = {}
        for part in (self.grow, self.regrouper):
            out.update(part.summary() if part is not None else {})
        return out

    # ----------------------------------------------------------------- start
    def _start_idle(self, job: Job, now: float, bf: Backfill | None, shared: bool = False,
                    shards: int | None = None) -> bool:
        if not self.idle or not self.sched.may_take_idle(job, now, bf, 1):
            return False
        gid = next(iter(self.idle))
        if shared:
            self._start_shared(job, self.gpus[gid], now, self.gpu_mem, shards)
        else:
            self._start_whole(job, [gid], now)
        return True

    def _begin(self, job: Job, now: float, cap: int) -> None:
        if job.first_start is None:
            job.first_start = now
        job.start = now
        job.last_t = now
        job.done = 0.0
        job.rate = 1.0
        job.cap = cap
        job.room = cap
        job.pack_pred = None
        job.warn_work = None
        job.warn_next = None
        if self.cfg.predictor and job.mem1 > cap:
            self._plan_warning(job)

    def _start_whole(self, job: Job, gids: list[int], now: float) -> None:
        for gid in gids:
            g = self.gpus[gid]
            del self.idle[gid]
            if self.mig and g.inst:
                self.mig.clear_idle_instances(g)
            if self.mig and not g.static:
                self.mig.set_free(g, None)
            g.whole = True
            g.jobs.append(job)
            self.usage.gpu_changed(g, was_busy=False)
        job.gpu_ids = gids
        job.shards = None
        job.inst = None
        self._begin(job, now, self.gpu_mem)
        self._schedule_job(job, now)

    # shared GPU (shard-fixed, lucid-like, colocate) ------------------------------------
    def _held(self, job: Job) -> int:
        return job.shards * int(self.share_bytes) if job.shards else job.mem0

    def _multi_key(self, g: Gpu) -> tuple | None:
        if 2 <= len(g.jobs) < self.cfg.max_jobs_per_gpu and all(j.gpus == 1 for j in g.jobs):
            return tuple(sorted((j.profile, self._held(j)) for j in g.jobs))
        return None

    def _single_del(self, g: Gpu) -> None:
        if self._multi_on:
            key = self._multi_key(g)
            d = self.multi.get(key) if key else None
            if d is not None:
                d.pop(g.id, None)
                if not d:
                    del self.multi[key]
                    self._single_ver += 1
        if len(g.jobs) == 1 and g.jobs[0].gpus == 1:
            j = g.jobs[0]
            key = (j.profile, self._held(j))
            d = self.single.get(key)
            if d is not None:
                d.pop(g.id, None)
                if not d:
                    del self.single[key]
                    self._single_ver += 1

    def _single_add(self, g: Gpu) -> None:
        if self._multi_on:
            key = self._multi_key(g)
            if key:
                d = self.multi.get(key)
                if d is None:
                    d = self.multi[key] = {}
                    self._single_ver += 1
                d[g.id] = None
                self._opened += 1
        if len(g.jobs) == 1 and g.jobs[0].gpus == 1:
            j = g.jobs[0]
            key = (j.profile, self._held(j))
            d = self.single.get(key)
            if d is None:
                d = self.single[key] = {}
                self._single_ver += 1
            d[g.id] = None
            self._opened += 1

    def _start_shared(self, job: Job, g: Gpu, now: float, cap: int, shards: int | None) -> None:
        was_busy = bool(g.jobs)
        if not was_busy:
            del self.idle[g.id]
        self._single_del(g)
        g.jobs.append(job)
        job.gpu_ids = [g.id]
        job.shards = shards
        job.inst = None
        self._begin(job, now, cap)
        if was_busy:
            job.packed_at = now
        self._single_add(g)
        self._rerate_shared(g, now)
        self.usage.gpu_changed(g, was_busy)
        self.policy.joined(g, job, now, was_busy)

    def _rerate_shared(self, g: Gpu, now: float) -> None:
        blind = len(g.jobs) > 1 and any(j.shards is None for j in g.jobs)
        if blind:  # no memory isolation: each job gets what its neighbours leave
            mem = {j.id: self._mem_now(j, now) for j in g.jobs}
            total = sum(mem.values())
            for j in g.jobs:
                j.room = min(j.cap, self.gpu_mem - (total - mem[j.id]))
        elif len(g.jobs) == 1:
            g.jobs[0].room = g.jobs[0].cap
        rates = []
        for j in g.jobs:
            rate = 1.0
            measured = True
            for o in g.jobs:
                if o is not j:
                    rate *= self.pairs.speed(j.profile, o.profile)
                    j.shared_with.add(o.id)
                    if not self.pairs.is_measured(j.profile, o.profile):
                        j.unmeasured = True
                        measured = False
            rates.append((j, rate, measured))
        if len(rates) > 2:  # no GPU gives more than its compute: sum of util x speed <= 100 %
            used = sum(j.util * r for j, r, _ in rates) / 100.0
            if used > 1.0:
                rates = [(j, r / used, m) for j, r, m in rates]
        for j, rate, measured in rates:
            if measured and len(rates) > 1:
                j.max_pair_slow = max(j.max_pair_slow, 1.0 / rate)
            self._set_rate(j, now, rate)

    @staticmethod
    def _mem_now(j: Job, now: float) -> int:
        """Memory a job holds now (it grows linearly with its progress)."""
        if j.mem1 == j.mem0:
            return j.mem0
        done = j.done + (now - j.last_t) * j.rate
        return int(j.mem0 + (j.mem1 - j.mem0) * min(1.0, max(0.0, done) / j.duration))

    def _start_instance(self, job: Job, g: Gpu, p: Placement, now: float) -> None:
        was_busy = g.busy > 0
        if not was_busy and not g.static:
            self.idle.pop(g.id, None)
        self.mig.occupy(g, p, job)
        g.jobs.append(job)
        job.gpu_ids = [g.id]
        job.inst = p
        job.shards = None
        prof = self.catalog.profile(p.profile)
        self._begin(job, now, prof.memory_mib << 20)
        frac = prof.compute_slices / self.catalog.compute_slices
        self.mig.refresh_free(g)
        self._set_rate(job, now, min(1.0, frac / (job.util / 100.0)))
        self.usage.gpu_changed(g, was_busy)


    # ----------------------------------------------------------------- running
    def _set_rate(self, job: Job, now: float, rate: float) -> None:
        job.done += (now - job.last_t) * job.rate
        job.last_t = now
        job.rate = rate
        if rate < job.min_rate:
            job.min_rate = rate
        self._schedule_job(job, now)

    def _schedule_job(self, job: Job, now: float) -> None:
        job.token += 1
        remaining = job.duration - job.done
        t_fin = now + remaining / job.rate
        job.t_end = t_fin
        self.sched.dirty = True
        for gid in job.gpu_ids:
            self.releases.touch(self.gpus[gid])
        kind, t = _FINISH, t_fin
        if job.mem1 > job.mem0:
            if job.warn_work is not None and job.warn_work > job.done:
                tw = now + (job.warn_work - job.done) / job.rate
                if tw < t:
                    kind, t = _WARN, tw
            if job.mem1 > job.room >= job.mem0:
                w_oom = (job.room - job.mem0) / (job.mem1 - job.mem0) * job.duration
                if w_oom >= job.done:
                    to = now + (w_oom - job.done) / job.rate
                    if to < t:
                        kind, t = _OOM, to
        if job.mem0 > job.room and job.done == 0.0:  # cannot even get its starting memory
            to = now + min(self.cfg.oom_startup_s, remaining / job.rate)
            if to < t:
                kind, t = _OOM, to
        self.loop.push(t, kind, job, job.token)

    def _sizes(self) -> tuple[int, ...]:
        if self.mig:
            return self.mig.sizes()
        k = max_shards(self.pk)
        return tuple(int(i * self.share_bytes) for i in range(1, k + 1)) + (self.gpu_mem,)

    def _plan_warning(self, job: Job) -> None:
        """When would the forecaster warn (in alone-seconds of work), and with which size."""
        if not self.cfg.predictor:
            return
        key = (job.mem0, job.mem1, job.cap)
        hit = self._warn_cache.get(key)
        if hit is None:
            if self._forecaster_cls is None:
                from predictor.forecast import Forecaster
                self._forecaster_cls = Forecaster
            n = self.cfg.predictor_samples
            f = self._forecaster_cls(job.cap, n, partition_sizes=self._sizes())
            hit = (None, None)
            for i in range(1, n + 1):
                mem = job.mem0 + (job.mem1 - job.mem0) * i / n
                if mem > job.cap:
                    break
                fc = f.update(i, mem)
                if fc.warn:
                    hit = (i / n, fc.next_partition)
                    break
            self._warn_cache[key] = hit
        frac, nxt = hit
        if frac is not None:
            job.warn_work = frac * job.duration
            job.warn_next = nxt

    def _restart_memory(self, job: Job, now: float, predicted: bool) -> None:
        """Out of memory (or warned before it): restart on a larger size, at the head."""
        if predicted:
            job.pred_restarts += 1
            job.remembered = max(job.remembered, job.warn_next or self.gpu_mem)
        else:
            job.oom_restarts += 1
            job.remembered = max(job.remembered, self._next_size(job.cap))
        if self.grow is not None and self.grow.try_grow(job, now, predicted):
            return  # restarted bigger on its GPU at once, younger neighbours evicted
        self._stop(job, now)
        self.sched.requeue(job)

    def _next_size(self, cap: int) -> int:
        for s in self._sizes():
            if s > cap:
                return s
        return self.gpu_mem

    def _stop(self, job: Job, now: float) -> None:
        """Take a running job off its GPU(s) without finishing it (work lost)."""
        job.done += (now - job.last_t) * job.rate
        job.lost_work += max(0.0, job.done)  # below 0: still redoing a move's restart
        job.token += 1
        self._release(job, now)
        job.done = 0.0

    def _finish(self, job: Job, now: float) -> None:
        job.done = job.duration
        job.end = now
        job.token += 1
        self.history.add(job.profile)
        self._release(job, now)

    def _release(self, job: Job, now: float) -> None:
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
            self._single_del(g)
            g.jobs.remove(job)
            self.releases.touch(g)
            if g.whole:
                g.whole = False
                if self.mig and not g.static:
                    self.mig.refresh_free(g)
            if not g.jobs:
                self.idle[g.id] = None
            else:
                self._single_add(g)
                self._rerate_shared(g, now)
            self.usage.gpu_changed(g, True)
            self.policy.left(g)
        job.gpu_ids = []


def simulate(cfg: SimConfig, specs: list[SimJobSpec], profiles: list[WorkloadProfile],
             pairs: PairTable) -> SimResult:
    """Run one policy on one workload."""
    return Simulator(cfg, specs, profiles, pairs).run()
