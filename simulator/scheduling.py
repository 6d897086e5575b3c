"""Slurm's scheduling in the replay: the queue, FIFO passes and EASY backfill.

The first job of the queue starts if it can; when it cannot, it gets a reservation (the
time enough whole GPUs will be free, from the running jobs' remaining times: see
:class:`~simulator.releases.ReleaseIndex`) and up to ``bf_depth`` later jobs
may start if they do not delay it (they end before the reservation, or use GPUs it does not
need). Run-time estimates are exact (Slurm uses time limits; a trace has none). A requeued
job goes to the head of the queue (a retry on the job's word, with
``SimConfig.oom_word_own_place``: back at its own place, by arrival). Multi-GPU jobs take whole idle GPUs under every policy;
a one-GPU job is placed by the run's :class:`~simulator.policy.Policy`, which
asks this scheduler's backfill tests (:meth:`Scheduler.may_take_idle`,
:meth:`Scheduler.may_pack`, :meth:`Scheduler.usable_idle`).

Speed (``SimConfig(fast=True)``): a pass is skipped when nothing it reads changed since a
pass that started nothing (``dirty``); within a pass a job is not tried when one of the
same shape no longer than it failed since the last start that opened room, when a time
test refused one of its shape that ended after the head's reservation and it does too
(every time test is ``now + duration x (1 or more) <= reservation``, or does not read the
duration), when the policy knows its shape found no room in the same state
(:meth:`~simulator.policy.Policy.no_room`), or when it knows its pack would be refused again
(:attr:`~simulator.policy.Policy.holds`); a pass that would only refuse the same packs again
is answered without the walk (:class:`~simulator.steady_pass.SteadyPass`).
``SimConfig(fast=False)`` runs every pass and tries every job, with identical results
(tested).
"""
from __future__ import annotations

import bisect
from collections import deque
from itertools import chain, islice
import math
from collections.abc import Callable
from typing import Iterator, Protocol

from simulator.events import ELIGIBLE, EventLoop
from simulator.releases import ReleaseIndex
from simulator.sharing import ShareIndex
from simulator.config import SimConfig
from simulator.state import Gpu, Job

class Holds(Protocol):
    """The refused packs known to stay refused a while (``simulator.refusal_hold.RefusalHolds``)."""

    def still_refused(self, job: Job, now: float, bf: "Backfill | None") -> bool: ...


class PassNote(Protocol):
    """The passes that would only refuse held packs again (``simulator.steady_pass.SteadyPass``)."""

    def holds_now(self, now: float) -> bool: ...

    def begin(self) -> None: ...

    def refused(self, job: Job) -> None: ...

    def end(self, started: bool, bf: "Backfill", now: float) -> None: ...


class StartRule(Protocol):
    """What a pass asks of the policy (``simulator.policy.Policy``)."""

    packs: bool
    uses_mig: bool

    def place(self, job: Job, now: float, bf: "Backfill | None") -> bool: ...

    def may_place_busy(self) -> bool: ...

    def shape(self, job: Job) -> tuple: ...

    def no_room(self, job: Job) -> bool: ...

    holds: Holds | None

    def order(self, cand: list[Job]) -> list[Job]: ...


class HeadMover(Protocol):
    """The regrouping: start the head now on GPUs it frees, if a plan is worth it."""

    def try_head(self, head: Job, now: float) -> bool: ...


class Backfill:
    """The head's reservation, computed on first use (most passes never need it)."""

    __slots__ = ("sched", "head", "now", "_shadow", "_extra", "pack_ok")

    def __init__(self, sched: "Scheduler", head: Job, now: float, pack_ok: bool):
        self.sched, self.head, self.now = sched, head, now
        self._shadow: float | None = None
        self._extra = 0
        self.pack_ok = pack_ok  # a pack cannot delay a one-GPU head of a packing policy

    def _compute(self) -> None:
        self._shadow, self._extra = self.sched.reservation(self.head, self.now)

    @property
    def computed(self) -> bool:
        """Whether the reservation was read."""
        return self._shadow is not None

    @property
    def shadow(self) -> float:
        if self._shadow is None:
            self._compute()
        return self._shadow

    @property
    def extra(self) -> int:
        if self._shadow is None:
            self._compute()
        return self._extra

    @extra.setter
    def extra(self, value: int) -> None:
        self._extra = value


class Scheduler:
    """The queue (requeued jobs first, then by arrival) and the scheduling pass."""

    def __init__(self, *, cfg: SimConfig, loop: EventLoop, idle: dict[int, None], releases: ReleaseIndex,
                 shares: ShareIndex):
        """``idle``: the idle GPUs (the cluster keeps them); the policy, the whole-GPU start
        and the regrouping come with `attach`, once they are built."""
        self.cfg, self.loop, self.idle, self.releases, self.shares = cfg, loop, idle, releases, shares
        self.policy: StartRule
        self.start_whole: Callable[[Job, list[int], float], None]
        self.regrouper: HeadMover | None = None
        self.front: deque[Job] = deque()  # requeued jobs, at the head
        self.own_place: set[int] = set()  # requeued jobs going back at their own place once eligible
        self.queue: dict[int, Job] = {}  # waiting jobs by arrival
        self.dirty = True  # something a scheduling pass looks at changed since the last one
        self.denied = False  # the last try failed a backfill time test (else: no room)
        self.refused = False  # the last try was refused by the load-aware admission (it pays not)
        self.position = 0  # the place in the queue of the job being tried (0: the head)
        self.passes = self.passes_skipped = 0
        self.late_skips = 0  # jobs not tried: ending after the reservation, as one refused
        self.edits = 0  # bumped at every change to the queue where a pass looks (its window)
        self.steady: PassNote | None = None  # with the policy's holds: passes answered unwalked

    def attach(self, policy: StartRule, start_whole: Callable[[Job, list[int], float], None],
               regrouper: HeadMover | None, steady: PassNote | None = None) -> None:
        """``steady``: the policy's passes answered unwalked (with its holds, no regrouping)."""
        self.policy, self.start_whole, self.regrouper, self.steady = policy, start_whole, regrouper, steady

    # ----------------------------------------------------------------- queue
    def arrive(self, job: Job, now: float) -> None:
        if len(self.front) + len(self.queue) <= self.cfg.bf_depth:
            self.dirty = True  # it lands where a pass looks
            self.edits += 1
        self.queue[job.id] = job

    def requeue(self, job: Job, now: float, at_head: bool = True) -> None:
        """A stopped job goes back to the head of the queue (``at_head``; else at its own place,
        by arrival), once Slurm's requeue delay is over (`SimConfig.requeue_delay_s`: until then
        it is not eligible, as a requeued job's BeginTime is pushed back by cred_expire + 1 s)."""
        if not at_head:
            self.own_place.add(job.id)
        delay = self.cfg.requeue_delay_s
        if delay <= 0:
            self.eligible(job, now)
            return
        self.loop.push(now + delay, ELIGIBLE, job, job.token)

    def eligible(self, job: Job, now: float) -> None:
        """A requeued job's BeginTime has come: it is at the head of the queue, or back at its
        own place among the waiting jobs (those that arrived before it stay ahead of it)."""
        if job.id in self.own_place:
            self.own_place.discard(job.id)
            self._back_in_line(job)
        else:
            self.front.appendleft(job)
        self.dirty = True
        self.edits += 1

    def _back_in_line(self, job: Job) -> None:
        """Put ``job`` into the arrival-ordered queue where its arrival places it."""
        waiting = list(self.queue.values())
        at = bisect.bisect_left(waiting, (job.submit, job.id), key=lambda j: (j.submit, j.id))
        if at == len(waiting):
            self.queue[job.id] = job
            return
        waiting.insert(at, job)
        self.queue = {j.id: j for j in waiting}

    def waiting(self) -> Iterator[Job]:
        return chain(self.front, self.queue.values())

    def _remove(self, job: Job) -> None:
        self.edits += 1
        if self.front and self.front[0] is job:
            self.front.popleft()
        elif job.id in self.queue:
            del self.queue[job.id]
        else:
            self.front.remove(job)

    # ----------------------------------------------------------------- pass
    def run_pass(self, now: float) -> None:
        """One Slurm scheduling pass: start the head while it fits, then backfill.

        Each candidate is judged against the state as it is when its turn comes. With
        ``fast``: a pass is skipped when nothing it looks at (GPUs, running jobs' expected
        ends, the first ``bf_depth + 1`` queued jobs, history, pairs to avoid) changed since
        a pass that started nothing, as that pass would start nothing again (every test is
        either on that state or ``now + duration <= reservation``, which only gets harder
        as time passes); and a job is not tried when one of the same shape (same workload
        and remembered size, or same GPU count) no longer than it failed since the last
        start in this pass (a longer job fails the same tests), or one of its shape that
        ended after the reservation was refused by a time test and it does too (so do
        those tests: a newcomer's run beside others is its duration over a speed of at
        most 1), or the policy says its shape still has no room (``Policy.no_room``).
        """
        fast = self.cfg.fast
        if fast and not self.dirty:
            self.passes_skipped += 1
            return
        self.passes += 1
        steady = self.steady if fast else None
        if steady is not None:
            if steady.holds_now(now):  # it would refuse the same packs again, start nothing
                self.dirty = True  # as those refusals mark it
                return
            steady.begin()
        self.dirty = False
        head = None
        regroup = self.regrouper
        held = self.policy.holds.still_refused if steady is not None else None
        started = False
        while self.front or self.queue:
            head = self.front[0] if self.front else next(iter(self.queue.values()))
            self.position = 0
            self.refused = False
            if held is not None and head.gpus == 1 and held(head, now, None):
                pass  # its pack refused again (the pass marked so)
            elif self.try_start(head, now, None) or (regroup and regroup.try_head(head, now)):
                self._remove(head)
                head = None
                started = True
                continue
            if steady is not None and self.refused:
                steady.refused(head)
            break
        if head is None or self.cfg.bf_depth == 0:
            return
        bf, started_bf = self._backfill(head, now, fast, steady)
        if steady is not None:
            steady.end(started or started_bf, bf, now)

    def _backfill(self, head: Job, now: float, fast: bool, steady: PassNote | None) -> tuple[Backfill, bool]:
        """The backfill walk after the head; (its reservation, whether it started a job)."""
        policy = self.policy
        bf = Backfill(self, head, now, head.gpus == 1 and policy.packs)
        failed: dict = {}  # shape -> shortest duration that failed since the last start
        late: set = set()  # shapes a time test refused though the job ends after the reservation
        cand = list(islice(self.waiting(), 1, self.cfg.bf_depth + 1))
        cand = policy.order(cand)
        inf = math.inf
        can1 = self._can_try_one()
        shape, no_room = policy.shape, policy.no_room
        held = policy.holds.still_refused if fast and policy.holds is not None else None
        started = False
        for pos, job in enumerate(cand, 1):
            self.position = pos
            if not (can1 if job.gpus == 1 else len(self.idle) >= job.gpus):
                continue
            if fast:
                key = ("g", job.gpus) if job.gpus > 1 else shape(job)
                if job.duration >= failed.get(key, inf):
                    continue
                if key in late and now + job.duration > bf.shadow:
                    self.late_skips += 1  # it ends after the reservation too: the same
                    continue  # tests refuse it
                if job.gpus == 1 and no_room(job):
                    failed[key] = -inf  # as if tried: it found no room in this same state
                    continue
                if held is not None and job.gpus == 1 and held(job, now, bf):
                    if steady is not None:
                        steady.refused(job)
                    continue  # as if tried: its pack refused again (the pass marked so)
            self.denied = self.refused = False
            opened = self.shares.opened
            if self.try_start(job, now, bf):
                started = True
                self._remove(job)
                can1 = self._can_try_one()
                if failed and (self.shares.opened != opened or policy.uses_mig):
                    failed.clear()  # the start opened room a shape that failed may use
                    late.clear()
            elif self.refused:
                if steady is not None:
                    steady.refused(job)
            elif fast:
                if self.denied:  # refused by a backfill time test: a shorter job may pass
                    failed[key] = min(job.duration, failed.get(key, inf))
                    if now + job.duration > bf.shadow:
                        late.add(key)
                else:
                    failed[key] = -inf
        self.position = 0  # a job placed outside a pass is read as the head
        return bf, started

    def _can_try_one(self) -> bool:
        """Cheap test: could anything start a one-GPU job now?"""
        return bool(self.idle) or self.policy.may_place_busy()

    def try_start(self, job: Job, now: float, bf: Backfill | None) -> bool:
        if job.gpus > 1:
            if len(self.idle) < job.gpus or not self.may_take_idle(job, now, bf, job.gpus):
                return False
            self.start_whole(job, list(islice(self.idle, job.gpus)), now)
            return True
        return self.policy.place(job, now, bf)

    # ----------------------------------------------------------------- backfill tests
    def reservation(self, head: Job, now: float) -> tuple[float, int]:
        """EASY: when will the head have its whole GPUs, and how many spare GPUs then."""
        need = head.gpus
        free = len(self.idle)
        if self.policy.uses_mig and need == 1:
            return math.inf, 0  # a MIG head waits for an instance: no whole-GPU reservation
        if need <= free:
            return now, free - need
        return self.releases.shadow(need - free, free, need)

    def may_take_idle(self, job: Job, now: float, bf: Backfill | None, n: int) -> bool:
        if bf is None:
            return True
        if now + job.duration <= bf.shadow:
            return True
        if n <= bf.extra:
            bf.extra -= n
            return True
        self.denied = True
        return False

    def may_pack(self, job: Job, now: float, bf: Backfill | None, g: Gpu | None = None) -> bool:
        """May ``job`` join a busy GPU (``g``) without delaying the head's reservation?

        Yes when it ends before the reservation, or when ``g``'s jobs end after it anyway
        (``g`` is not one of the GPUs the reservation counts on, so slowing them down cannot
        delay the head)."""
        if bf is None or bf.pack_ok or now + job.duration <= bf.shadow:
            return True
        if g is not None and self.releases.end(g.id) > bf.shadow:
            return True
        self.denied = True
        return False

    def usable_idle(self, job: Job, now: float, bf: Backfill | None) -> int:
        """Idle GPUs this one-GPU job may take now (backfill keeps some for the head)."""
        n = len(self.idle)
        if not n or bf is None or now + job.duration <= bf.shadow:
            return n
        if bf.extra >= 1:
            return min(n, bf.extra)
        self.denied = True
        return 0
