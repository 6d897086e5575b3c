"""Regrouping in the replay: the head's whole GPUs freed by moving packed jobs (`packer.regroup`).

With ``SimConfig(regroup=True)`` (colocate), when the head of the queue wants whole GPUs
(a multi-GPU job, or a one-GPU job colocate would not pack) and cannot start, while idle
GPUs plus GPUs holding only jobs that may be moved would be enough, the simulator asks
``packer.regroup.plan_regroup`` (``SuiteRules.regroup``), the helper's own planner with the
run's thresholds, for a plan and runs it when the
planner says its gain (the head's earlier start against the EASY reservation the replay
would give it) beats its cost:

- **who may be moved**: a fixed share of the jobs (``movable_fraction``, default 0.3,
  chosen by a hash of the job id, the same jobs in every run) declare ``--requeue`` with a
  checkpoint signal ``--signal=B:USR1@<checkpoint_grace_s>`` (default 120 s); the others
  are never touched. Multi-GPU jobs are never moved here: the replay has no topology (a
  job takes any idle GPUs), so moving one frees nothing another GPU would not;
- **the view**: the replay has no nodes (a job takes any idle GPUs), so the planner sees
  one node holding every GPU (``NODE``): any GPUs it frees serve the head; a one-GPU job holds its share count, or for
  colocate's first job on a GPU its memory now, in shares; packed jobs go only onto GPUs
  that already run packed jobs (an idle target frees no GPU in a replay without nodes);
  pair speeds are colocate's predictions, an avoided pair predicted at 1 % speed;
- **the moves** run at once in the replay, costed as the planner costs them: a moved job
  loses the work since its checkpoint (none: it waits for its signal's grace time) and
  redoes its requeue and restart time (``restart_s``, default 60 s, plus the planner's 30 s
  requeue latency), counted as lost work; the head starts on the freed GPUs and counts as
  started when the plan says it would (after the last checkpoint wait and requeue), the
  GPUs held meanwhile;
- **bounds**: ``regroup_moves_per_plan`` (default 2) and ``regroup_moves_per_hour``
  (default 12, a sliding hour of simulated time, ``packer.regroup_budget.MoveBudget``); a
  head that got no plan is looked at again after ``regroup_retry_s`` (default 600 s).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import islice

from packer.corunner import pair_key
from packer.decision import max_shards
from packer.regroup_model import Cluster, GpuInfo, HeadJob, Holding, Movability, RunningJob, SignalSpec
from packer.regroup_plan import RegroupPlan
from packer.config import PackerConfig
from packer.rules import SuiteRules
from simulator.config import SimConfig
from simulator.growth import held_shares
from simulator.state import Gpu, Job

log = logging.getLogger(__name__)

NODE = "sim"  # the replay has no topology: one node holding every GPU
AVOIDED_SPEED = 0.01
SPARE_CLEARABLE = 8  # clearable GPUs shown to the planner beyond twice what the head misses
MAX_TARGETS = 48  # GPUs with room shown to the planner as places for the moved jobs


def declares_movable(job_id: int, fraction: float) -> bool:
    """Whether job `job_id` declared it can be moved: a fixed hash of its id under `fraction`."""
    return ((job_id * 2654435761 + 40503) % 2**32) / 2**32 < fraction


@dataclass(frozen=True)
class RegroupHands:
    """What a plan does to jobs: start the head on whole GPUs (job, GPU ids, now) or shared
    (job, GPU, now, memory, shares), take a job off its GPU, push a job's next event."""

    start_whole: Callable[[Job, list[int], float], None]
    start_shared: Callable[[Job, Gpu, float, int, int | None], None]
    release: Callable[[Job, float], None]
    reschedule: Callable[[Job, float], None]


class Regrouper:
    """The regrouping wiring, its budget and its counters."""

    def __init__(self, *, cfg: SimConfig, rules: SuiteRules, pk: PackerConfig, jobs: Iterable[Job],
                 gpus: Sequence[Gpu], idle: Collection[int], avoid: Collection[tuple[str, str]], gpu_mem: int,
                 decide: Callable, known_speed: Callable[[str, str], float],
                 reservation: Callable, hands: RegroupHands):
        """``decide``, ``known_speed``: the policy's admit (memoised) and pair speed;
        ``reservation``: the scheduler's reservation of a head job."""
        self.cfg, self.rules, self.pk, self.gpus, self.idle, self.avoid = cfg, rules, pk, gpus, idle, avoid
        self.gpu_mem, self.decide, self.known_speed, self.reservation = gpu_mem, decide, known_speed, reservation
        self.hands = hands
        self.now = 0.0
        # the rules' thresholds; an idle target frees no GPU in a replay without nodes
        self.settings = replace(self.rules.regroup_settings, allow_idle_targets=False)
        self.budget = self.rules.move_budget(lambda: self.now)
        self.signal = SignalSpec("USR1", int(cfg.checkpoint_grace_s), batch_only=True)
        self.movable = {j.id: declares_movable(j.id, cfg.movable_fraction) for j in jobs}
        self.total = self.pk.shares_per_gpu
        self.keys = [(NODE, g.id) for g in self.gpus]
        self.gid = {k: i for i, k in enumerate(self.keys)}
        self.gpu_view = tuple(GpuInfo(n, i, shares=self.total) for n, i in self.keys)
        self.last_try: dict[int, float] = {}
        self.plans = self.moves = self.planner_calls = 0
        self.lost_s = self.restart_s = self.head_gain_s = 0.0

    # ------------------------------------------------------------------ when
    def _wants_whole(self, head: "Job") -> bool:
        if head.gpus > 1:
            return True
        return self.decide(head, 0).verdict != "packed"

    def _fewest_moves(self, missing: int) -> int | None:
        """The fewest moves that could clear `missing` GPUs (each clearable GPU costs one
        move per job on it); None when fewer GPUs than that can be cleared at all."""
        mov = self.movable
        counts = sorted(len(g.jobs) for g in self.gpus
                        if g.jobs and not g.whole and all(j.gpus == 1 and mov[j.id] for j in g.jobs))
        return sum(counts[:missing]) if len(counts) >= missing else None

    def try_head(self, head: "Job", now: float) -> bool:
        """Run a plan that starts `head` now on freed GPUs; False when none is worth it."""
        self.now = now
        last = self.last_try.get(head.id)
        if last is not None and now - last < self.cfg.regroup_retry_s:
            return False
        allowed = min(self.rules.regroup_moves_per_plan, self.budget.remaining())
        missing = head.gpus - len(self.idle)
        if missing <= 0 or missing > allowed or not self._wants_whole(head):
            return False  # it fits (another rule holds it), or needs more moves than allowed
        self.last_try[head.id] = now  # looked at now (a scan of the GPUs, then maybe a plan)
        fewest = self._fewest_moves(missing)
        if fewest is None or fewest > allowed:
            return False
        shadow, _ = self.reservation(head, now)
        target = HeadJob(head.id, gpus=head.gpus, submitted_at=head.submit,
                         expected_start=shadow if math.isfinite(shadow) else None)
        self.planner_calls += 1
        d = self.rules.regroup(self._view(head, now), target, now, self.budget, pair_speed=self._pair_speed,
                              settings=self.settings)
        if d.chosen is None:
            log.debug("head job %d: %s", head.id, d.reason)
            return False
        self._run(d.chosen, head, now)
        self.budget.record(d.moves)
        return True

    # ------------------------------------------------------------------ the view
    def _view(self, head: "Job", now: float) -> Cluster:
        """The part of the cluster a plan for `head` can use: some idle GPUs, the GPUs
        cheapest to clear (fewest jobs, fewest shares; twice what is missing, plus
        ``SPARE_CLEARABLE``) and up to ``MAX_TARGETS`` GPUs with room for a moved job
        (most free shares first). Bounded, so a plan costs the same on any cluster size."""
        mov = self.movable
        per_gpu = self.rules.max_jobs_per_gpu
        idle = list(islice(self.idle, head.gpus))
        clear, room = [], []
        for g in self.gpus:
            if not g.jobs or g.whole:
                continue
            used = sum(held_shares(self.pk, j, now) for j in g.jobs)
            if all(j.gpus == 1 and mov[j.id] for j in g.jobs):
                clear.append((len(g.jobs), used, g.id))
            elif len(g.jobs) < per_gpu and used < self.total:
                room.append((used, g.id))
        clear.sort()
        n_clear = 2 * (head.gpus - len(idle)) + SPARE_CLEARABLE
        room += [(used, gid) for n, used, gid in clear[n_clear:] if n < per_gpu and used < self.total]
        room.sort()
        gids = idle + [gid for _, _, gid in clear[:n_clear]] + [gid for _, gid in room[:MAX_TARGETS]]
        jobs: dict[int, "Job"] = {}
        for gid in gids:
            for j in self.gpus[gid].jobs:
                jobs[j.id] = j
        return Cluster(tuple(self.gpu_view[gid] for gid in gids),
                       tuple(self._running(j, now) for j in jobs.values()),
                       max_jobs_per_gpu=per_gpu, max_packed_shares=max_shards(self.pk))

    def _running(self, j: "Job", now: float) -> RunningJob:
        keys = [self.keys[gid] for gid in j.gpu_ids]
        if j.gpus > 1 or any(self.gpus[gid].whole for gid in j.gpu_ids):
            holdings = tuple(Holding(n, i) for n, i in keys)
            move = Movability()  # no topology in the replay: moving it frees nothing
        else:
            (n, i), = keys
            holdings = (Holding(n, i, shares=held_shares(self.pk, j, now)),)
            move = Movability(requeue=True, signal=self.signal) if self.movable[j.id] else Movability()
        return RunningJob(j.id, holdings, j.start, max(0.0, j.t_end - now), move, speed=j.rate,
                          restart_s=self.cfg.restart_s, workload=j.workload, util_pct=j.util)

    def _pair_speed(self, a: str, b: str) -> float | None:
        if pair_key(a, b) in self.avoid:
            return AVOIDED_SPEED
        return self.known_speed(a, b)

    # ------------------------------------------------------------------ the moves
    def _run(self, plan: RegroupPlan, head: "Job", now: float) -> None:
        on = {j.id: j for g in self.gpus for j in g.jobs}
        for m in plan.moves:
            (h,) = m.to
            self._relocate(on[m.job_id], self.gid[h.gpu], now, m.lost_s, m.restart_s + m.requeue_s)
            self.moves += 1
            self.lost_s += m.lost_s
            self.restart_s += m.restart_s + m.requeue_s
        gids = [self.gid[k] for k in plan.frees]
        if any(gid not in self.idle for gid in gids):
            raise RuntimeError(f"regroup plan for job {head.id} left {plan.frees} busy: {plan.summary()}")
        first = head.first_start is None
        if head.gpus > 1:
            self.hands.start_whole(head, gids, now)
        else:
            self.hands.start_shared(head, self.gpus[gids[0]], now, self.gpu_mem, None)
        delay = max(0.0, plan.head_start_with - now)  # its GPUs held while the moves finish
        if first:
            head.first_start = now + delay
        head.done = -delay
        self.hands.reschedule(head, now)
        self.plans += 1
        self.head_gain_s += plan.head_gain_s
        log.debug("%s", plan.summary())

    def _relocate(self, job: "Job", gid: int, now: float, lost: float, overhead: float) -> None:
        """Move a one-GPU job to GPU `gid` keeping its checkpointed work; it redoes `lost`
        seconds of work and spends `overhead` seconds requeueing and restarting."""
        done = job.done + (now - job.last_t) * job.rate
        job.token += 1
        self.hands.release(job, now)
        g = self.gpus[gid]
        base = {x.id: x.rate for x in g.jobs}
        self.hands.start_shared(job, g, now, job.cap, job.shards)
        job.pack_base = base
        job.done = done - lost - overhead
        job.lost_work += lost + overhead
        job.moves += 1
        self.hands.reschedule(job, now)

    def summary(self) -> dict:
        return {"regroup_plans": self.plans, "regroup_moves": self.moves,
                "regroup_lost_work_s": round(self.lost_s + self.restart_s, 1),
                "regroup_lost_since_checkpoint_s": round(self.lost_s, 1),
                "regroup_head_gain_s": round(self.head_gain_s, 1),
                "regroup_planner_calls": self.planner_calls}
