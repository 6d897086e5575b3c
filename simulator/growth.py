"""Grow by preemption in the replay: the running-preemptor decision of `packer.grow`.

With ``SimConfig(grow_preempt=True)`` (colocate), a packed job (one holding a share count)
that must grow, because the predictor warns it will outgrow its share or it ran out of
memory (its remembered size is now larger than its share), is a *running preemptor*: the
simulator asks ``packer.grow.plan_growth`` (``SuiteRules.grow``), the helper's own decision,
with the run's grow thresholds, for its GPU as the
node agent would show it:

- every job on the GPU is a tenant with the shares it holds: its share count, or for a
  job started alone without one (colocate's first job on a GPU, no memory isolation) the
  memory it holds now (what NVML shows), in shares;
- jobs may be requeued (Slurm's default ``--requeue``) and lose the work of their attempt
  (a grow eviction does not wait for a checkpoint); the evicted go to the head of the
  queue, their pair not recorded (growth is not contention);
- the grower restarts at once on the same GPU with the share count the decision gives
  (its attempt is lost, as with any restart for memory), instead of waiting in the queue.

When the decision does not act (only older neighbours, or more than a packed job may
hold, or the thresholds say no), the job goes back to the head of the queue as before.
"""
from __future__ import annotations

import logging
import math

from packer.config import PackerConfig
from packer.grow import GpuShares, GrowDecision, Preemptor, Tenant, grow_request
from packer.rules import SuiteRules
from simulator.handles import JobMoves
from simulator.memory import mem_now
from simulator.state import Gpu, Job

log = logging.getLogger(__name__)


def held_shares(config: PackerConfig, job: Job, now: float) -> int:
    """Shares `job` holds on its GPU: its share count, else the memory it holds now (what
    NVML shows, at least its estimate), in shares of ``config``'s GPU."""
    total = config.shares_per_gpu
    if job.shards:
        return job.shards
    mem = max(mem_now(job, now), job.mem0)
    return max(1, min(total, math.ceil(mem / config.share_bytes)))


class GrowPreemption:
    """The running-preemptor wiring and its counters: ``rules`` decide (``SuiteRules.grow``),
    ``moves`` act on the jobs of ``gpus``."""

    def __init__(self, rules: SuiteRules, gpus: list[Gpu], moves: JobMoves):
        self.rules = rules
        self.config = rules.config
        self.share_bytes = rules.config.share_bytes
        self.gpus = gpus
        self.moves = moves
        self.max_packed = rules.max_packed_shares
        self.total = rules.config.shares_per_gpu
        self.restarts = 0  # growers restarted bigger in place
        self.evictions = 0  # younger neighbours requeued for them
        self.lost_s = 0.0  # work those neighbours lost
        self.declined = 0  # preemptors the decision turned down (they went through the queue)

    def tenants(self, g: "Gpu", now: float) -> GpuShares:
        return GpuShares(str(g.id), self.total, tuple(
            Tenant(j.id, j.start, held_shares(self.config, j, now)) for j in g.jobs))

    def _decide(self, job: "Job", now: float, predicted: bool, need: int) -> GrowDecision | None:
        """The rules' grow decision for `job` needing `need` bytes; None: not a packed
        one-GPU job, or it needs a whole GPU (only the queue gives one)."""
        if not job.shards or len(job.gpu_ids) != 1:
            return None
        req = grow_request(job.shards, need, self.share_bytes, self.max_packed)
        if req is None:
            return None
        g = self.gpus[job.gpu_ids[0]]
        why = "the predictor warns it will outgrow its share" if predicted else "ran out of memory"
        p = Preemptor(job.id, str(g.id), True, req[0], req[1], since=job.start, waiting_since=now,
                      held_shares=job.shards, why=why)
        (d,) = self.rules.grow([self.tenants(g, now)], [p], now)
        return d

    def evicts_for_warning(self, job: "Job", now: float, need: int) -> bool:
        """Whether the decision evicts neighbours for a warned job needing `need` bytes: the
        helper's grow watch then acts before its memory watch prices a restart."""
        d = self._decide(job, now, True, need)
        return d is not None and d.acted and bool(d.evictions)

    def try_grow(self, job: "Job", now: float, predicted: bool) -> bool:
        """Grow `job` in place if the decision says so; False: it goes through the queue.

        Called when it must restart for memory, after its remembered size was raised."""
        d = self._decide(job, now, predicted, job.remembered)
        if d is None:
            return False
        g = self.gpus[job.gpu_ids[0]]
        if not d.acted:
            self.declined += 1
            log.debug("job %d: %s", job.id, d.reason)
            return False
        by_id = {j.id: j for j in g.jobs}
        for e in reversed(d.evictions):  # the youngest ends up first at the head
            victim = by_id[e.job_id]
            victim.preemptions += 1
            before = victim.lost_work
            self.moves.requeue(victim, now)
            self.evictions += 1
            self.lost_s += victim.lost_work - before  # its progress, not the wall time
        self.moves.stop(job, now)
        base = {x.id: x.rate for x in g.jobs}
        job.remembered = max(job.remembered, int(d.grower_shares * self.share_bytes))
        self.moves.start_shared(job, g, now, int(d.grower_shares * self.share_bytes), d.grower_shares)
        job.pack_base = base
        self.restarts += 1
        log.debug("%s", d.reason)
        return True

    def summary(self) -> dict:
        return {"grow_preemptions": self.evictions, "grow_restarts_in_place": self.restarts,
                "grow_declined": self.declined, "grow_lost_work_s": round(self.lost_s, 1)}
