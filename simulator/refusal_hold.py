"""colocate's refused packs that surely stay refused for a while: the backfill skips their try.

A queued one-GPU job whose pack the load-aware admission refused is tried again at every pass
(:class:`~simulator.pack_memo.RefusedPacks` replays the choice and judges the admission anew:
it reads the clock, the queue behind the job and the release its wait ends at). While the
choice stands, the admission's gain moves only in known ways as the clock moves (the wait for
a whole GPU falls, the residents' work left falls at their speeds), and one way as the queue
grows, so :func:`packer.admission.refusal_holds` says until when, and for which queues, the
refusal surely stands. A refusal kept in ``RefusedPacks`` is noted here
(:meth:`RefusalHolds.note`) with that time and every other input its replay reads, each
explicit (:class:`Hold`), checked in :meth:`RefusalHolds.still_refused`:

- what the job's co-runner memo rests on (:meth:`RefusalHolds.epoch`: the pair knowledge,
  pairs learned and refits, the pairs to avoid, the workloads with a history, the identity
  levels in use; with the job's attempt and remembered size, the same memo);
- with none honoured (the head a one-GPU job): the memo, brought up to date with the kinds
  of busy GPU first (as the try's first step does), ranking the same kind first, and the
  GPU still its kind's first (``group``); with a reservation honoured: every start, end,
  stop and change of speed and every GPU filed or taken out (:meth:`RefusalHolds.strict`:
  the time tests read them all), and the same reservation, read where the try reads it;
- the GPU's jobs (``residents``, ``tokens``: an attempt moves at every change of the job's
  speed: the same work left, falling at the same rate);
- no idle GPU;
- the release the wait ends at no later than the bound allows;
- the jobs waiting behind it within the queues the bound allows.

While all of them hold and the clock is before the time found, :meth:`still_refused`
answers for the try: refused again, with the same marks on the pass (``dirty``, ``refused``)
and the same reservation computed, so the pass goes on as after the try it replaces.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packer.admission import RefusalHold, refusal_holds
from simulator.knowledge import PairKnowledge
from simulator.releases import ReleaseIndex
from simulator.sharing import ShareIndex
from simulator.state import Gpu, Job

if TYPE_CHECKING:
    from packer.rules import SuiteRules
    from simulator.corunner_kinds import NewcomerMemo
    from simulator.pack_memo import Refusal, RefusedPacks
    from simulator.scheduling import Backfill, Scheduler

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hold:
    """A refusal that stands until ``until`` while every other input is as noted."""

    epoch: int  # RefusalHolds.epoch() then
    strict: tuple | None  # with a reservation honoured: RefusalHolds.strict() then (else None)
    token: int  # the job's attempt
    remembered: int  # the job's remembered size
    shadow: float | None  # the reservation honoured (None: none)
    memo: "NewcomerMemo"  # the job's co-runner memo (brought up to date at each look)
    ranked: object  # the kind the memo ranked first (with none honoured: still first)
    group: dict  # the GPUs of the kind chosen (with none honoured: the GPU still its first)
    gpu: Gpu
    residents: tuple  # the jobs on the GPU
    tokens: tuple  # and their attempts (each moves at every change of the job's speed)
    release: float  # the latest release the wait may end at
    fewest: int  # the jobs behind it the refusal holds for
    most: int
    until: float


class RefusalHolds:
    """Queued job id -> :class:`Hold` of its refused pack."""

    def __init__(self, *, rules: "SuiteRules", sched: "Scheduler", gpus: int, releases: ReleaseIndex,
                 shares: ShareIndex, know: PairKnowledge, avoid: Collection, history: Collection,
                 idle: Collection, refusals: "RefusedPacks", refresh: Callable[["NewcomerMemo"], object],
                 guess_version: Callable[[], int] = lambda: 0):
        """``refresh``: brings a co-runner memo up to date with the kinds of busy GPU
        (``CorunnerKinds.qualifying``, as the try does first)."""
        self.rules, self.sched, self.gpus = rules, sched, gpus
        self.releases, self.shares, self.know = releases, shares, know
        self.avoid, self.history, self.idle, self.refusals = avoid, history, idle, refusals
        self.guess_version, self.refresh = guess_version, refresh
        self._by_job: dict[int, Hold] = {}
        self.skips = 0  # tries answered here

    def __len__(self) -> int:
        return len(self._by_job)

    def epoch(self) -> int:
        """What the job's co-runner memo rests on (``ColocatePolicy._kinds_for``'s epoch): the
        pair knowledge, the pairs to avoid, the workloads with a history, the identity levels
        in use. Each only grows, so the sum moves whenever one does."""
        return self.know.version + len(self.avoid) + len(self.history) + self.guess_version()

    def strict(self) -> tuple:
        """What the reservation's time tests read: every release and every GPU filed."""
        return self.releases.stamp, self.shares.changes

    def forget(self, job: Job) -> None:
        self._by_job.pop(job.id, None)

    def _ahead(self) -> tuple[int, float]:
        """(jobs behind the one tried, the release its wait ends at: ``math.inf`` when none),
        as ``RefusedPacks.admits`` reads them."""
        sched = self.sched
        ahead = sched.position
        rel = self.releases.sorted
        return (max(0, len(sched.front) + len(sched.queue) - 1 - ahead),
                rel[min(ahead, len(rel) - 1)][0] if rel else math.inf)

    def note(self, job: Job, hit: "Refusal", now: float, bf: "Backfill | None") -> None:
        """``job``'s pack at ``hit`` was just refused (and kept) in a try (``bf`` None: the
        head's): hold it while it surely stays refused."""
        self.forget(job)
        if self.idle:
            return
        behind, release = self._ahead()
        rules = self.rules
        if rules.admission != "load-aware":  # refused for a speed of 0: reads no clock, no queue
            bound = RefusalHold(math.inf, 0, 1 << 40, math.inf)
        else:
            residents = [(x.left(now), s, x.rate) for x, s in zip(hit.gpu.jobs, hit.theirs)]
            bound = refusal_holds(max(0.0, job.duration - job.done), hit.mine, residents, behind,
                                  self.gpus, max(0.0, release - now), rules.min_speed)
        if bound.seconds > 0.0:
            jobs = hit.gpu.jobs
            self._by_job[job.id] = Hold(
                self.epoch(), None if hit.shadow is None else self.strict(), job.token, job.remembered, hit.shadow,
                hit.state[2], hit.ranked, hit.group, hit.gpu, tuple(jobs), tuple([x.token for x in jobs]),
                release + bound.later_s, bound.fewest, bound.most, now + bound.seconds)

    def held(self, job: Job) -> Hold | None:
        """``job``'s hold, if its last try left one."""
        return self._by_job.get(job.id)

    def still_refused(self, job: Job, now: float, bf: "Backfill | None") -> bool:
        """True (the try answered: refused again, the pass marked as the try would) when
        ``job``'s refused pack surely stands: every input as noted, the clock before the hold's
        end. Brings the job's co-runner memo up to date and reads the reservation where the
        try it replaces did."""
        h = self._by_job.pop(job.id, None)  # kept below only while it holds
        if h is None:
            return False
        if (now >= h.until or h.token != job.token or h.remembered != job.remembered or self.idle
                or h.epoch != self.epoch()):
            return False  # the try judges again (and notes the refusal anew)
        if h.strict is not None and h.strict != (self.releases.stamp, self.shares.changes):
            return False
        jobs = h.gpu.jobs
        if tuple(jobs) != h.residents or tuple([x.token for x in jobs]) != h.tokens:
            return False
        behind, release = self._ahead()
        if release > h.release or not h.fewest <= behind <= h.most:
            return False
        if h.shadow is None:  # the choice: the first GPU of the kind the memo ranks first
            memo = h.memo
            if memo.kinds_version != self.shares.version:
                self.refresh(memo)  # as the try's first step would
            if not (bf is None or bf.pack_ok) or memo.best() is not h.ranked or next(iter(h.group), None) != h.gpu.id:
                return False
        elif bf is None or bf.pack_ok or bf.shadow != h.shadow:
            return False
        self._by_job[job.id] = h
        self.skips += 1
        self.refusals.hits += 1
        self.refusals.kept += 1
        sched = self.sched
        sched.dirty = sched.refused = True  # as the refused try marks the pass
        sched.denied = False
        return True
