"""Each running job's progress: its rate, and its next event on the loop's heap.

A job's progress rate is its speed relative to running alone: 1 alone; the measured pair
speed when shared (:mod:`~simulator.sharing`); on a MIG instance with a
fraction ``f`` of the compute, ``min(1, f / util)`` where ``util`` is its measured GPU
utilisation alone. Its next event is the earliest of its end, the predictor's warning,
the out-of-memory its room on the GPU gives it (:mod:`~simulator.memory`) and
its failure beside a pair that cannot run together (``fail_at``,
:mod:`~simulator.pair_failure`). A job at speed 0 has no end event.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

from simulator.events import FINISH, OOM, PAIR_FAIL, WARN, EventLoop
from simulator.releases import ReleaseIndex
from simulator.state import Gpu, Job


class PassFlag(Protocol):
    """The scheduler's mark that something a pass looks at changed."""

    dirty: bool


class Progress:
    def __init__(self, *, predictor: bool, oom_startup_s: float, gpus: Sequence[Gpu], loop: EventLoop,
                 releases: ReleaseIndex, sched: PassFlag, plan_warning: Callable[[Job], None]):
        """``plan_warning``: the memory part's warning plan for a job that will outgrow its room."""
        self.predictor = predictor
        self.oom_startup_s = oom_startup_s
        self.gpus = gpus
        self.loop = loop
        self.releases = releases
        self.sched = sched
        self.plan_warning = plan_warning

    def begin(self, job: Job, now: float, cap: int) -> None:
        """A new attempt of ``job`` starts now with ``cap`` bytes it may use."""
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
        job.fail_at = None
        if self.predictor and job.mem1 > cap and job.jump_at is None:  # no series foresees a jump
            self.plan_warning(job)

    def set_rate(self, job: Job, now: float, rate: float) -> None:
        job.done += (now - job.last_t) * job.rate
        job.last_t = now
        job.rate = rate
        if rate < job.min_rate:
            job.min_rate = rate
        self.reschedule(job, now)

    def reschedule(self, job: Job, now: float) -> None:
        """Push the job's next event (its earlier ones go stale) and re-file its GPUs."""
        job.token += 1
        remaining = job.duration - job.done
        rate = job.rate
        if rate <= 0.0:  # beside a pair that cannot run together: no progress until it fails
            job.t_end = now + self.oom_startup_s + remaining  # an estimate, for the reservations
        else:
            job.t_end = now + remaining / rate
        self.sched.dirty = True
        touch, gpus = self.releases.touch, self.gpus
        for gid in job.gpu_ids:
            touch(gpus[gid])
        kind, t = (FINISH, job.t_end) if rate > 0.0 else (FINISH, math.inf)
        if job.mem1 > job.mem0 and rate > 0.0:
            if job.warn_work is not None and job.warn_work > job.done:
                tw = now + (job.warn_work - job.done) / rate
                if tw < t:
                    kind, t = WARN, tw
            if job.mem1 > job.room >= job.mem0:
                w_oom = (job.jump_at * job.duration if job.jump_at is not None
                         else (job.room - job.mem0) / (job.mem1 - job.mem0) * job.duration)
                if w_oom >= job.done:
                    to = now + (w_oom - job.done) / rate
                    if to < t:
                        kind, t = OOM, to
        if job.mem0 > job.room and job.done == 0.0:  # cannot even get its starting memory
            to = now + (self.oom_startup_s if rate <= 0.0 else min(self.oom_startup_s, remaining / rate))
            if to < t:
                kind, t = OOM, to
        if job.fail_at is not None and job.fail_at < t:
            kind, t = PAIR_FAIL, job.fail_at
        if t == math.inf:
            return
        self.loop.push(t, kind, job, job.token)
