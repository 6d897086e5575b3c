"""A scheduling pass that would only refuse the same packs again: answered without the walk.

A pass that starts nothing but whose tries the load-aware admission refused marks the
scheduler ``dirty`` (the admission reads the clock and the queue), so the next event runs a
pass again, which mostly refuses the same packs. When each of those refusals is held
(:class:`~simulator.refusal_hold.RefusalHolds`: it surely stands until a time, for a range
of queues behind it), :class:`SteadyPass` notes the pass (:meth:`SteadyPass.end`): the
earliest of those times, the queue lengths all of them allow, and what the pass read
besides (:meth:`SteadyPass.signature`): every start, end, stop and change of speed
(``ReleaseIndex.stamp``: the idle GPUs, the releases, the reservation), every GPU filed
(``ShareIndex.changes``), what the co-runner memos rest on (``RefusalHolds.epoch``), every
change to the queue where a pass looks (``Scheduler.edits``: its head, its first
``bf_depth + 1`` jobs). A later pass with all of that the same, only the clock moved (before
that time) and jobs arrived behind the window (the queue allowed), would try the same jobs
in the same state: each test not about the clock gives the same answer, each time test
(``now + duration <= reservation``) only gets harder, and the held refusals read no time
test. It starts nothing and refuses the same packs again; :meth:`SteadyPass.holds`
answers for it (the scheduler counts it as a pass, marked ``dirty`` as its refusals would).
"""
from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

from simulator.state import Job

if TYPE_CHECKING:
    from simulator.refusal_hold import RefusalHolds
    from simulator.scheduling import Backfill, Scheduler

log = logging.getLogger(__name__)


class SteadyPass:
    """The last pass that started nothing and whose refusals were all held."""

    def __init__(self, sched: "Scheduler", holds: "RefusalHolds"):
        self.sched, self.holds = sched, holds
        self._noted: tuple | None = None  # (signature, until, fewest, most jobs waiting) of that pass
        self._until = math.inf  # the pass under way: the earliest end of its holds
        self._fewest, self._most = 0, math.inf  # the queue lengths they all allow
        self._steady = False  # every refusal of the pass under way held so far
        self.answered = 0  # passes answered here

    def signature(self) -> tuple:
        """What a pass reads besides the clock and the queue behind its window."""
        sched = self.sched
        return sched.releases.stamp, sched.shares.changes, self.holds.epoch(), sched.edits

    def holds_now(self, now: float) -> bool:
        """True when the pass at ``now`` would start nothing and refuse the same packs."""
        noted = self._noted
        if noted is None:
            return False
        sched = self.sched
        if not (now < noted[1] and noted[2] <= len(sched.front) + len(sched.queue) <= noted[3]):
            return False
        if noted[0] != self.signature():
            self._noted = None  # its versions only grow: that state never comes back
            return False
        self.answered += 1
        return True

    def begin(self) -> None:
        """A pass starts (walked)."""
        self._noted = None
        self._until, self._fewest, self._most, self._steady = math.inf, 0, math.inf, True

    def refused(self, job: Job) -> None:
        """``job``'s try in the pass under way (at ``Scheduler.position``) was refused by the
        admission: it counts if held, for the queue lengths its hold allows."""
        if not self._steady:
            return
        h = self.holds.held(job)
        if h is None:
            self._steady = False
            return
        sched = self.sched
        waiting = len(sched.front) + len(sched.queue)
        behind = max(0, waiting - 1 - sched.position)
        if behind != waiting - 1 - sched.position:
            self._steady = False  # (cannot be: the job is in the queue)
            return
        self._until = min(self._until, h.until)
        self._fewest = max(self._fewest, waiting + h.fewest - behind)
        self._most = min(self._most, waiting + h.most - behind)

    def end(self, started: bool, bf: "Backfill", now: float) -> None:
        """The walked pass ends: note it when it started nothing, every refusal was held and
        its reservation (if it read one) is not the clock itself."""
        if started or not self._steady or (bf.computed and bf.shadow <= now):
            return
        self._noted = (self.signature(), self._until, self._fewest, self._most)
