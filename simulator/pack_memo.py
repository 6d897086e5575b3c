"""colocate's memo of the packs the admission refused: what a pass learned about a queued
job, kept until something it rests on changes.

While no GPU is idle, a queued one-GPU job that colocate tries goes through the packer's
decision, the kinds of busy GPU that qualify for it, the co-runner rule's choice among them
(the reservation's time tests included) and, last, the load-aware admission
(``SuiteRules.pack_pays``), which in a loaded cluster refuses most packs: the job would
lose more than waiting for a whole GPU costs it. Everything before the admission depends
on the state alone, not on the clock; the admission's verdict moves with the clock and the
queue's length. So a refused try leaves here the GPU the rule chose and the speeds it
predicted there, with :meth:`RefusedPacks.state` (what the choice rests on), and a later
try of the same job in the same state judges the admission again on them at once.

The state is explicit (:meth:`RefusedPacks.state`, :meth:`RefusedPacks.take`): the job's
attempt and remembered size, the co-runner rule's memo for the job
(:class:`~simulator.corunner_kinds.NewcomerMemo`, brought up to date first: a new memo when
the model is refitted), the workloads with a history, and no idle GPU. With nothing to honour
(the head, or a pass whose head is a one-GPU job of a packing policy) the rule takes the
first GPU of the kind it ranks best: the memo holds while that kind is still ranked first
with the same answer (``NewcomerMemo.best``: a kind that does not qualify, or ranks below it,
appearing or going leaves it standing) and that GPU is still its kind's first. With a
reservation to honour, its time tests read every release and every kind ranked before the
chosen one: the memo holds while the qualifying kinds and their answers stand
(``NewcomerMemo.live_version``), nothing starts, ends, stops or changes speed
(``ReleaseIndex.stamp``), no group of busy GPUs changes (``ShareIndex.changes``) and the
reservation is the same; a choice that a time test made only because the newcomer itself
ends before the reservation (which stops being true as time passes) is not kept
(``timed``). The admission is judged again at each try on the GPU's jobs as they are then,
the queue's length and the clock (:meth:`RefusedPacks.admits`), unless the refusal is held
(:mod:`simulator.refusal_hold`: it surely stands until a time the admission's inputs give).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.knowledge import PairKnowledge
from simulator.releases import ReleaseIndex
from simulator.sharing import ShareIndex
from simulator.state import Gpu, Job

if TYPE_CHECKING:
    from packer.rules import SuiteRules
    from simulator.corunner_kinds import NewcomerMemo
    from simulator.scheduling import Backfill, Scheduler

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Refusal:
    """A refused try: the state it was made in; the reservation it honoured (None: none to
    honour) and then what the reservation's time tests read (``strict``: the release index's
    and the share groups' stamps); the GPUs of the kind the rule chose (``group``) and the
    GPU (the group's first where nothing was to honour); the speeds predicted there (as the
    admission takes them): the newcomer's and each job's there, in the GPU's order."""

    state: tuple
    shadow: float | None
    strict: tuple | None
    group: dict
    gpu: Gpu
    mine: float
    theirs: tuple[float, ...]
    ranked: object = None  # the ``Ranked`` of the kind chosen (the co-runner memo's answer)
    live: int = 0  # the co-runner memo's ``live_version`` then


class RefusedPacks:
    """Queued job id -> its last refused try (:class:`Refusal`); a job's entry goes when it
    is tried again (and comes back if it is refused again)."""

    def __init__(self, *, rules: "SuiteRules", sched: "Scheduler", gpus: int, releases: ReleaseIndex,
                 shares: ShareIndex, know: PairKnowledge, avoid: Collection, history: Collection,
                 idle: Collection, guess_version=lambda: 0):
        """``gpus``: the cluster's GPU count (the admission's queue per GPU); ``guess_version``:
        changes when an identity level stops being used (simulator.recurrence.Guesses)."""
        self.rules, self.sched, self.gpus = rules, sched, gpus
        self.releases, self.shares, self.know = releases, shares, know
        self.avoid, self.history, self.idle = avoid, history, idle
        self.guess_version = guess_version
        self._by_job: dict[int, Refusal] = {}
        self._pays = None  # SuiteRules.pack_pays_values, bound on first use
        self.hits = self.misses = self.kept = 0

    def __len__(self) -> int:
        return len(self._by_job)

    def state(self, job: Job, kinds: "NewcomerMemo | None") -> tuple | None:
        """What the rule's choice for ``job`` rests on in any case: the job's attempt and
        remembered size, the co-runner rule's memo for it (``kinds``, up to date: a new one when
        the model is refitted or the job's decision changes), the workloads with a history
        (and the identity levels in use); None when a GPU is idle or the packer would not pack
        it (``kinds`` None: not kept). Which kind the memo ranks now is :meth:`take`'s test."""
        if self.idle or kinds is None:
            return None
        return (job.token, job.remembered, kinds, len(self.history), self.guess_version())

    def strict(self) -> tuple:
        """What the reservation's time tests read besides it: every release, every group."""
        return self.releases.stamp, self.shares.changes

    def take(self, job: Job, state: tuple | None, bf: "Backfill | None") -> Refusal | None:
        """The job's refused try if the rule would choose the same GPU now: made in
        ``state``, and with nothing to honour then and now, the GPU still first of its kind;
        with the same reservation to honour, nothing started, ended or changed speed since.
        Its entry is removed either way. Computes ``bf``'s reservation only where the try
        it replays did."""
        hit = self._by_job.pop(job.id, None)
        if hit is None:
            return None
        if state is None or hit.state != state or not self._same_choice(hit, bf):
            self.misses += 1
            return None
        self.hits += 1
        return hit

    def _same_choice(self, hit: Refusal, bf: "Backfill | None") -> bool:
        free = bf is None or bf.pack_ok
        kinds = hit.state[2]  # the job's co-runner memo, up to date (the same one: the same state)
        if hit.shadow is None:  # nothing to honour: the first GPU of the kind ranked first, as then
            return free and kinds.best() is hit.ranked and bool(hit.group) and next(iter(hit.group)) == hit.gpu.id
        # a reservation: the kinds ranked before the chosen one were refused by time tests
        return (not free and kinds.live_version == hit.live and hit.strict == self.strict()
                and bf.shadow == hit.shadow)

    def keep(self, job: Job, refusal: Refusal) -> None:
        self.kept += 1
        self._by_job[job.id] = refusal

    def forget(self, job: Job) -> None:
        self._by_job.pop(job.id, None)

    def admits(self, job: Job, g: Gpu, mine: float, theirs: tuple[float, ...], now: float, idle: bool) -> bool:
        """``SuiteRules.pack_pays`` for ``job`` beside ``g``'s jobs at these speeds (in
        [0, 1]), with the queue as colocate's ``queue_view`` reads it (``idle``: a whole GPU
        is there now), on plain numbers (``SuiteRules.pack_pays_values``: the same
        arithmetic, none of its objects; this runs at every try of a queued job)."""
        sched = self.sched
        ahead = sched.position
        rel = self.releases.sorted
        wait = 0.0 if idle else max(0.0, rel[min(ahead, len(rel) - 1)][0] - now) if rel else math.inf
        residents = [(x.left(now), s) for x, s in zip(g.jobs, theirs)]
        pays = self._pays
        if pays is None:
            pays = self._pays = self.rules.pack_pays_values_fn()
        return pays(max(0.0, job.duration - job.done), mine, residents,
                    max(0, len(sched.front) + len(sched.queue) - 1 - ahead), self.gpus, wait)

    @staticmethod
    def shadow_of(bf: "Backfill | None") -> float | None:
        """The reservation a try honoured (None: nothing to honour); read after the try
        computed it."""
        return None if bf is None or bf.pack_ok else bf.shadow
