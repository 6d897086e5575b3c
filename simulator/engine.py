"""Discrete-event replay of a job trace on a cluster of N GPUs, under one policy.

:class:`Simulator` wires the parts of one run together and plays the trace:

- :mod:`~simulator.events`: the event loop (time, heap of job events, arrivals);
- :mod:`~simulator.scheduling`: Slurm's queue, FIFO passes and EASY backfill,
  with :mod:`~simulator.releases` (when each busy GPU is released);
- :mod:`~simulator.policy`: the one interface of the policies, chosen by name
  in :mod:`~simulator.registry` (:mod:`~simulator.baselines`,
  :mod:`~simulator.colocate`, :mod:`~simulator.mig_policies`);
- :mod:`~simulator.cluster`: putting jobs on GPUs and taking them off, with
  :mod:`~simulator.sharing` (GPUs shared without MIG: the index of GPUs by
  what runs on them, pair speeds) and :mod:`~simulator.mig_state` (MIG
  partitions and instances);
- :mod:`~simulator.progress` (each job's rate and next event),
  :mod:`~simulator.memory` (memory growth, the predictor's warnings, restart
  sizes), :mod:`~simulator.usage` (time-integrated use);
- the helper's actions on running jobs: :mod:`~simulator.growth` (grow by
  preemption) and :mod:`~simulator.regrouping`.

The decisions are the suite's own code, called as in production through one
``packer.rules.SuiteRules`` (``self.rules``, the object the live helper's watches decide
through): ``packer.decision.decide`` (exclusive or packed, and how many shares),
``packer.corunner.rank_corunners`` (the co-runner), ``packer.contention.check_contention``
(requeue on contention and pair avoidance), ``predictor.restart.decide_restart`` (restart on a
memory warning or keep the job), ``packer.grow.plan_growth``, ``packer.regroup.plan_regroup``;
and directly ``mig.fsm``/``mig.policies.choose``/``mig.planner.plan_merge_split``/
``mig.layout.homogeneous_layout`` (MIG placement, merge/split, homogeneous layouts) and
``predictor.forecast.Forecaster`` (early restart before an out-of-memory).

A restart (out-of-memory, early restart, contention requeue) loses the work of the attempt,
as a Slurm requeue does, and the job goes to the head of the queue.
"""
from __future__ import annotations

import logging
import time

from mig.catalog import Catalog, load_catalog
from packer.rules import SuiteRules
from simulator.cluster import Cluster
from simulator.config import SimConfig
from simulator.events import CHECK, ELIGIBLE, FINISH, OOM, PAIR_FAIL, WARN, EventLoop
from simulator.growth import GrowPreemption
from simulator.knowledge import PairKnowledge
from simulator.memory import MemoryRestarts
from simulator.mig_state import MigState
from simulator.handles import JobMoves
from simulator.pair_failure import PairFailures
from simulator.progress import Progress
from simulator.recurrence import Guesses
from simulator.regrouping import Regrouper, RegroupHands
from simulator.policy import PolicyHandles
from simulator.registry import policy_type
from simulator.releases import ReleaseIndex
from simulator.result import SimResult
from simulator.scheduling import Scheduler
from simulator.steady_pass import SteadyPass
from simulator.settings import LegacyReplay, legacy_packer
from simulator.sharing import ShareIndex
from simulator.state import Gpu, Job
from simulator.usage import UsageMeter
from simulator.workload import PairTable, SimJobSpec, WorkloadProfile

log = logging.getLogger(__name__)


class Simulator:
    """One run: the parts, wired together, and the handlers of the job events."""

    def __init__(self, cfg: SimConfig, specs: list[SimJobSpec], profiles: list[WorkloadProfile],
                 pairs: PairTable, rules: SuiteRules | None = None):
        """``rules``: the decisions to make, taken whole (its packer settings too); None: those
        ``cfg`` gives (``SimConfig.rules``)."""
        self.cfg = cfg
        self.catalog: Catalog = load_catalog(cfg.gpu_model)
        self.gpu_mem = int(self.catalog.memory_mib) << 20
        # the packer settings: the run's (`gpupack simulate` gives the shipped gpupack.toml's or a
        # site's), else the replay-legacy preset (simulator.settings.legacy_packer)
        self.pk = cfg.packer or legacy_packer(self.catalog, LegacyReplay(
            cfg.pair_predict, cfg.admission == "load-aware") if cfg.policy == "colocate" else None)
        if rules is not None:
            self.pk = rules.config
        self.rules = rules or cfg.rules(self.pk)  # every decision of the run, as the helper makes it
        self.share_bytes = self.pk.share_bytes
        self.profiles = profiles
        self.pairs = pairs
        self.know = PairKnowledge(cfg.pair_knowledge, profiles, pairs, self.rules)
        self.gpus = [Gpu(i) for i in range(cfg.gpus)]
        self.idle: dict[int, None] = {i: None for i in range(cfg.gpus)}  # idle GPUs, in the order freed
        self.loop = EventLoop()
        self.releases = ReleaseIndex()  # when each busy GPU is released
        self.history: set[int] = set()  # profiles with a finished run (the packer's history)
        self.avoid: set[tuple[str, str]] = set()  # pairs the contention watch found hurting
        per_gpu = self.rules.max_jobs_per_gpu
        self.shares = ShareIndex(self.share_bytes, per_gpu, multi_on=cfg.policy == "colocate" and per_gpu > 2)
        self.sched = Scheduler(  # the queue, passes and backfill tests
            cfg=cfg, loop=self.loop, idle=self.idle, releases=self.releases, shares=self.shares)
        self.usage = UsageMeter(cfg.timeline_step_s)
        self.moves = JobMoves(stop=self.stop, requeue=self.requeue_at_head,
                              start_shared=lambda *a: self.cluster.start_shared(*a))
        policy = policy_type(cfg.policy)
        # identity levels (simulator.recurrence): which history each job finds, colocate only
        self.guesses = Guesses(cfg.recurrence) if cfg.recurrence is not None and cfg.policy == "colocate" else None
        # the MIG side of the cluster (MIG policies only)
        self.mig = MigState(cfg, self.catalog, self.gpus, self.idle, self.rules) if policy.uses_mig else None
        self.memory = MemoryRestarts(cfg, self.rules, self.gpu_mem, self.mig)
        self.progress = Progress(  # each job's rate and next event
            predictor=cfg.predictor, oom_startup_s=cfg.oom_startup_s, gpus=self.gpus, loop=self.loop,
            releases=self.releases, sched=self.sched, plan_warning=self.memory.plan_warning)
        self.pair_failures = PairFailures(  # pairs that cannot run together (speed 0)
            startup_s=cfg.oom_startup_s, gpus=self.gpus, gpu_mem=self.gpu_mem, pairs=pairs, know=self.know,
            avoid=self.avoid, learns_pairs=policy.learns_pairs, moves=self.moves)
        self.cluster = Cluster(  # jobs on and off GPUs, every index kept up to date
            gpus=self.gpus, idle=self.idle, gpu_mem=self.gpu_mem, catalog=self.catalog, pairs=pairs,
            sched=self.sched, progress=self.progress, shares=self.shares,
            releases=self.releases, usage=self.usage, mig=self.mig, pair_failures=self.pair_failures)
        self.policy = policy(PolicyHandles(  # the one-GPU start rule and hooks the loop calls
            cfg=cfg, rules=self.rules, profiles=profiles, catalog=self.catalog, gpu_mem=self.gpu_mem,
            share_bytes=self.share_bytes, gpus=self.gpus, idle=self.idle, shares=self.shares,
            releases=self.releases, loop=self.loop, sched=self.sched, cluster=self.cluster, mig=self.mig,
            know=self.know, avoid=self.avoid, history=self.history, moves=self.moves, guesses=self.guesses))
        self.cluster.attach(self.policy)
        n_whole = self.mig.n_whole if self.mig else cfg.gpus
        self.skipped = 0
        self.jobs: list[Job] = []
        for s in specs:
            if s.gpus > n_whole and (s.gpus > 1 or not (self.mig and self.mig.static_fits(s))):
                self.skipped += 1
                continue
            job = Job(s, profiles[s.profile])
            if cfg.recurrence is not None:
                job.guess = (cfg.recurrence.level_of(s.id), cfg.recurrence.error_of(s.id))
            self.jobs.append(job)
        self.grow = GrowPreemption(self.rules, self.gpus, self.moves) if cfg.grow_preempt else None
        self.regrouper = Regrouper(
            cfg=cfg, rules=self.rules, pk=self.pk, jobs=self.jobs, gpus=self.gpus, idle=self.idle, avoid=self.avoid,
            gpu_mem=self.gpu_mem, decide=self.policy._decide, known_speed=self.policy._pair_speed,
            reservation=self.sched.reservation,
            hands=RegroupHands(start_whole=self.cluster.start_whole, start_shared=self.cluster.start_shared,
                               release=self.cluster.release, reschedule=self.progress.reschedule),
        ) if cfg.regroup else None
        holds = self.policy.holds  # colocate's held refusals: the passes that would only refuse them again
        steady = SteadyPass(self.sched, holds) if holds is not None and self.regrouper is None else None
        self.sched.attach(self.policy, self.cluster.start_whole, self.regrouper, steady)

    # ----------------------------------------------------------------- run
    def run(self) -> SimResult:
        t0 = time.perf_counter()
        arrivals = sorted(self.jobs, key=lambda j: (j.submit, j.id))
        handlers = {
            FINISH: self.finish,
            OOM: lambda job, t: self.restart_memory(job, t, predicted=False),
            WARN: lambda job, t: self.restart_memory(job, t, predicted=True),
            CHECK: self.policy.check,
            PAIR_FAIL: self.pair_failures.fail,
            ELIGIBLE: self.sched.eligible,
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
            knowledge=self.policy.summary(), actions=self._actions_summary(),
            rules=self.rules.settings())

    def _actions_summary(self) -> dict:
        out = {**self.memory.summary(), "pair_failures": self.pair_failures.count}
        for part in (self.grow, self.regrouper):
            out.update(part.summary() if part is not None else {})
        return out

    # ----------------------------------------------------------------- job events
    def restart_memory(self, job: Job, now: float, predicted: bool) -> None:
        """Out of memory (or warned before it): restart on a larger size, at the head. A
        warning is priced first (``SuiteRules.restart``, as the live memory watch does) unless
        the grow decision evicts neighbours for it (the helper's grow watch acts before its
        memory watch): a job kept running runs on, and runs out of memory later if its memory
        really outgrows it."""
        if not predicted and self.guesses is not None:
            self.guesses.out_of_memory(job)  # a looser level's wrong guess counts against it
        grow = self.grow
        growing = predicted and grow is not None and grow.evicts_for_warning(job, now, self.memory.warned_size(job))
        if predicted and not self.memory.restart_on_warning(job, now, growing):
            self.progress.set_rate(job, now, job.rate)  # its next event: the end or the OOM
            return
        at_head = True
        if predicted:
            self.memory.remember_bigger(job)
        else:
            decision = self.memory.retry_oom(job, now)
            if decision is None:  # contained in its share; retries spent
                self.stop(job, now)
                job.end, job.oom_failed = now, True
                return
            at_head = decision.at_head or not self.cfg.oom_word_own_place
        if grow is not None and grow.try_grow(job, now, predicted):
            return  # restarted bigger on its GPU at once, younger neighbours evicted
        if at_head:
            self.requeue_at_head(job, now)
        else:  # the job's word: no lift above jobs that waited longer
            self.stop(job, now)
            self.sched.requeue(job, now, at_head=False)

    def requeue_at_head(self, job: Job, now: float) -> None:
        """Take ``job`` off its GPU (its attempt lost) and put it back at the head of the queue."""
        self.stop(job, now)
        self.sched.requeue(job, now)

    def stop(self, job: Job, now: float) -> None:
        """Take a running job off its GPU(s) without finishing it (work lost)."""
        job.done += (now - job.last_t) * job.rate
        job.lost_work += max(0.0, job.done)  # below 0: still redoing a move's restart
        job.token += 1
        self.cluster.release(job, now)
        job.done = 0.0

    def finish(self, job: Job, now: float) -> None:
        job.done = job.duration
        job.end = now
        job.token += 1
        self.history.add(job.profile)
        self.cluster.release(job, now)


def simulate(cfg: SimConfig, specs: list[SimJobSpec], profiles: list[WorkloadProfile],
             pairs: PairTable, rules: SuiteRules | None = None) -> SimResult:
    """Run one policy on one workload (``rules``: see :class:`Simulator`)."""
    return Simulator(cfg, specs, profiles, pairs, rules).run()
