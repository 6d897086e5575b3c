"""The colocate policy (pack, then requeue on contention) as a :class:`~.policy.Policy` object.

A one-GPU job runs alone while a GPU it may use is idle; otherwise ``packer.decision.decide``
sizes it and ``packer.corunner`` ranks the busy GPUs it may join (both through the run's
``SuiteRules``, ``self.rules``: ``admit`` and ``corunners``) (predicted pair speeds from
this run's :mod:`~simulator.knowledge`); ``check`` is the contention
watch after ``monitor_s`` (:mod:`~simulator.contention_watch`). ``pair_predict`` off: the
history rule alone (pack, then requeue on a slowdown). The cluster state (GPUs, the
share index, the queue, the reservation) is the run's
(:class:`~simulator.engine.Simulator`); this object holds the start rule, the reservation's
timing and the admission; which kinds of busy GPU qualify, and their order, are
:class:`~simulator.corunner_kinds.CorunnerKinds`' (the co-runner rule and its memos).
"""
from __future__ import annotations

import math

from packer.admission import QueueView
from packer.corunner import GpuLoad, Ranked
from packer.decision import ClusterView, Estimate
from packer.request import Candidate

from simulator.contention_watch import ContentionWatch
from simulator.corunner_kinds import CorunnerKinds, NewcomerMemo
from simulator.events import CHECK
from simulator.late_scan import LateScan
from simulator.no_room import NoRoomMemo
from simulator.pack_memo import Refusal, RefusedPacks
from simulator.policy import Policy, PolicyHandles
from simulator.refusal_hold import RefusalHolds

from simulator.scheduling import Backfill
from simulator.state import Gpu, Job

_CANDIDATE = Candidate(field="tres_per_node", gpu_type=None, dialect="23.11")


class ColocatePolicy(Policy):
    """colocate's start rule (the co-runner rule); its contention watch is ``self.watch``."""

    name = "colocate"
    packs = True
    learns_pairs = True  # the co-runner rule keeps apart self.avoid

    def __init__(self, h: PolicyHandles):
        super().__init__(h)
        self._decide_cache: dict = {}  # decide() by what it reads
        # the co-runner rule over the kinds of busy GPU, memoised per kind of queued job
        self.kinds = CorunnerKinds(self.rules, self.know, self.avoid, self.shares, self.profiles, self.gpu_mem,
                                   self.cfg.pair_predict)
        self._pair_speed = self.kinds.pair_speed  # what the engine's other parts predict pairs with
        self.watch = ContentionWatch(  # monitor_s after each pack
            know=self.know, rules=self.rules, avoid=self.avoid, gpus=self.gpus, sched=self.sched,
            requeue=self.moves.requeue, pair_predict=self.cfg.pair_predict, queue_view=self.queue_view)
        g = self.guesses  # identity levels (simulator.recurrence), or None: exact history after one run
        self._guess_key = g.key if g is not None else (lambda job: ())
        self._guess_version = (lambda: g.version) if g is not None else (lambda: 0)
        self.full = NoRoomMemo(  # the shapes that found no room (the fast path's skip)
            know=self.know, avoid=self.avoid, history=self.history, shares=self.shares, idle=self.idle,
            guess=self._guess_key, guess_version=self._guess_version)
        self.no_room = self.full.still_none  # Policy.no_room, without a call in between
        self.late = LateScan(self.releases, self.shares)  # per kind: GPUs released after the reservation
        self.refusals = RefusedPacks(  # the packs the admission refused, while their state stands
            rules=self.rules, sched=self.sched, gpus=self.cfg.gpus, releases=self.releases, shares=self.shares,
            know=self.know, avoid=self.avoid, history=self.history, idle=self.idle,
            guess_version=self._guess_version)
        self.holds = RefusalHolds(  # those refusals that surely stand a while: the backfill skips them
            rules=self.rules, sched=self.sched, gpus=self.cfg.gpus, releases=self.releases, shares=self.shares,
            know=self.know, avoid=self.avoid, history=self.history, idle=self.idle, refusals=self.refusals,
            refresh=self.kinds.qualifying, guess_version=self._guess_version)
        self._try: tuple = (None, None)  # the state and reservation of the try under way
        self._timed = False  # the try's choice rested on the newcomer ending before the reservation

    def _estimate(self, job: Job) -> Estimate | None:
        """What the job's history says: none before its profile's first run ends; then the
        profile's need (no identity levels), or the estimate of the level its identity
        matches (``simulator.recurrence``: none for a new identity)."""
        if not self.cfg.known_history and job.profile not in self.history:
            return None
        if self.guesses is not None:
            return self.guesses.estimate(job, self.profiles[job.profile].util_pct)
        return Estimate(job.mem0, self.profiles[job.profile].util_pct, 1, source="sim-history")

    def shape(self, job: Job) -> tuple:
        return ("p", job.profile, job.remembered, self._guess_key(job))

    def _decide(self, job: Job, idle_usable: int):
        """The rules' admit (packer.decision.decide), memoised on what it reads (it is pure)."""
        known = self.cfg.known_history or job.profile in self.history
        key = (job.profile, known, job.remembered, idle_usable > 0, self._guess_key(job))
        d = self._decide_cache.get(key)
        if d is None:
            remembered = math.ceil(job.remembered / self.share_bytes) if job.remembered else None
            d = self._decide_cache[key] = self.rules.admit(
                _CANDIDATE, self._estimate(job), ClusterView(idle_gpus=idle_usable),
                fingerprint=job.workload, remembered_shards=remembered)
        return d

    def may_place_busy(self) -> bool:
        return bool(self.shares.single) or bool(self.shares.multi)

    def joined(self, g: Gpu, job: Job, now: float, was_busy: bool) -> None:
        if was_busy:  # the contention watch looks at the pack once both jobs' speeds are measured
            self.loop.push(now + self.cfg.monitor_s, CHECK, job, job.token)

    def check(self, job: Job, now: float) -> None:
        self.watch.check(job, now)

    def summary(self) -> dict:
        """The pair prediction's error and the pairs observed (none without prediction)."""
        levels = self.guesses.summary() if self.guesses is not None else {}
        if not self.cfg.pair_predict:
            return levels
        return {**levels, "pair_knowledge": self.cfg.pair_knowledge, **self.know.error.as_dict(),
                **self.know.model_error()}

    def place(self, job: Job, now: float, bf: Backfill | None) -> bool:
        """Alone on an idle GPU if one is usable, else packed beside the co-runner
        ``packer.corunner`` picks (``choose_corunner``'s choice: the first kind of GPU
        ``rank_corunners`` ranks that the reservation lets through). Load-aware admission
        with an idle GPU usable: packed first where the pack pays with no wait to save
        (the idle GPU then serves the next job in a long queue), else alone."""
        sched = self.sched
        if bf is None:
            self.holds.forget(job)  # the head's try (a backfill's is answered by still_refused first)
        state = self.refusals.state(job, self._kinds_for(job))  # None: a GPU is idle
        self._try = (state, bf)
        self._timed = False
        hit = self.refusals.take(job, state, bf)  # refused before, the same choice now (taken out)
        if hit is not None:  # judge the admission again
            if not self.refusals.admits(job, hit.gpu, hit.mine, hit.theirs, now, False):
                self.refusals.keep(job, hit)
                self.holds.note(job, hit, now, bf)
                sched.dirty = sched.refused = True  # as pays(): refused again
                return False
            # it pays now: the try below makes the same choice and starts it
        usable = sched.usable_idle(job, now, bf)
        d = self._decide(job, usable)
        if d.verdict != "packed":
            if usable:
                if self.rules.admission == "load-aware" and self.cfg.pair_predict:
                    d0 = self._decide(job, 0)
                    if d0.verdict == "packed" and self._pack(job, now, bf, d0, idle=True):
                        return True
                return self.cluster.start_idle(job, now, bf, shared=True)
            return self.full.found_none(job, None)
        return self._pack(job, now, bf, d, idle=False)

    def _kinds_for(self, job: Job) -> NewcomerMemo | None:
        """The co-runner rule's memo for ``job`` brought up to date (its qualifying kinds, their
        rank), when no GPU is idle and the packer would pack it (else None): what a refused
        try's choice rests on besides the job (:meth:`RefusedPacks.state`). Which memo (the
        packer's decision, :meth:`CorunnerKinds.newcomer`) is kept on the job while none of
        what they read changed: the workloads with a history, the pairs to avoid, the pair
        knowledge (``PairKnowledge.version``: any pair learned, any refit), the identity
        levels in use (each count only grows, so their sum moves whenever one does), and the
        job's remembered size."""
        if self.idle:
            return None
        epoch = len(self.history) + len(self.avoid) + self.know.version + self._guess_version()
        at = job.kinds_at
        if at is not None and at[0] == epoch and at[1] == job.remembered:
            memo = at[2]
        else:
            d = self._decide(job, 0)
            memo = self.kinds.newcomer(job, d.shards * int(self.share_bytes)) if d.verdict == "packed" else None
            job.kinds_at = (epoch, job.remembered, memo)
        if memo is not None and memo.kinds_version != self.shares.version:
            self.kinds.qualifying(memo)
        return memo

    def _pack(self, job: Job, now: float, bf: Backfill | None, d, idle: bool) -> bool:
        """Start ``job`` beside the co-runner the rule picks, if the pack pays (``idle``: a
        whole GPU is there for it, so packing saves it no wait)."""
        need = d.shards * int(self.share_bytes)
        memo = self.kinds.newcomer(job, need)
        if not self.shares.single and not self.shares.multi:
            return self.full.found_none(job, memo.qualifies)
        if not self.kinds.qualifying(memo):
            return self.full.found_none(job, memo.qualifies)
        chosen = self._choose(job, now, None if bf is None or bf.pack_ok else bf, memo)
        if chosen is None:
            return False
        gid, ranked = chosen
        if not self.pays(job, self.gpus[gid], ranked, now, idle):
            return False
        self.sched.denied = False
        self._start_beside(job, self.gpus[gid], now, need, d.shards)
        return True

    def _choose(self, job: Job, now: float, bf: Backfill | None, memo: NewcomerMemo) -> tuple | None:
        """choose_corunner's choice, (GPU, its ``Ranked``): the GPU of the best kind the
        reservation ``bf`` lets through (None: nothing to honour, the best kind's first GPU,
        :meth:`NewcomerMemo.best`), or None when it lets none."""
        if bf is None:
            return next(iter(self.kinds.group(memo.order[0][1]))), memo.best()
        for r in self.kinds.ranked(memo):  # the first kind the reservation lets through (each refusal
            gid = self._in_time(job, now, bf, r.gpu, r.mine, r.theirs)  # marks the pass denied)
            if gid is not None:
                # choose_corunner would ask the kinds after it too, to no effect: the job
                # starts (the pass not denied) or the pack does not pay (the pass refused)
                return gid, r
        return None

    def queue_view(self, now: float, behind: int, idle: bool = False, ahead: int = 0) -> QueueView:
        """The queue as the admission rule reads it: ``behind`` jobs waiting besides the
        one placed, the cluster's GPUs, and when it would have a whole GPU: now (``idle``),
        else when the busy GPUs have freed one for each of the ``ahead`` jobs before it and
        one for it (the last release known, if fewer are busy: a lower bound)."""
        rel = self.releases.sorted
        wait = 0.0 if idle else max(0.0, rel[min(ahead, len(rel) - 1)][0] - now) if rel else float("inf")
        return QueueView(waiting=max(0, behind), gpus=self.cfg.gpus, wait_s=wait)

    def pays(self, job: Job, g: Gpu, ranked: Ranked, now: float, idle: bool = False) -> bool:
        """The rules' load-aware admission (``SuiteRules.pack_pays``) for ``job`` beside
        ``g``'s jobs at the speeds the co-runner rule predicted there."""
        if not self.cfg.pair_predict:
            return True  # the history rule alone: pack, then requeue on a slowdown
        mine, theirs = _unit(ranked.mine), tuple(_unit(s) for s in ranked.theirs)
        if self.refusals.admits(job, g, mine, theirs, now, idle):
            return True
        # the verdict moves with the clock and the queue: the next pass must not be skipped,
        # nor another job of this shape (its duration and co-runner differ)
        sched = self.sched
        sched.dirty = sched.refused = True
        state, bf = self._try
        if not idle and state is not None and not self._timed:  # kept for its next try
            shadow = self.refusals.shadow_of(bf)
            refusal = Refusal(state, shadow, None if shadow is None else self.refusals.strict(),
                              self.kinds.group(self.kinds.kind_of(ranked.gpu.gpu_id)), g, mine, theirs,
                              ranked, state[2].live_version)
            self.refusals.keep(job, refusal)
            self.holds.note(job, refusal, now, bf)
        return False

    def _in_time(self, job: Job, now: float, bf: Backfill, gl: GpuLoad, mine: float,
                 theirs: tuple[float, ...]) -> int | None:
        """A GPU of this kind the head's reservation does not count on, or one the pack
        leaves free in time; None (and the pass marked denied) when there is none."""
        shadow = bf.shadow
        run = job.duration / max(mine, 1e-9)  # the newcomer's run beside it
        new_ok = now + run <= shadow
        # the job there loses (1 - speed) of its progress while the newcomer runs: its end
        # moves by run * (1 - speed) at most (fixed in time, so a pass that was refused
        # stays refused while nothing changes)
        delay = run * (1.0 - min(theirs))
        key = self.kinds.kind_of(gl.gpu_id)
        group = self.kinds.group(key)
        # a GPU's release is its jobs' latest expected end (ReleaseIndex)
        if new_ok and self.late.earliest(key, group) + delay <= shadow:  # some GPU is left free in time: the first
            self._timed = True  # (a choice that holds only while the newcomer ends in time)
            of = self.releases.of  # of the group that passes either test
            for gid in group:
                end = of[gid]
                if end > shadow or end + delay <= shadow:
                    return gid
        first_late = self.late.first_late(key, group, shadow)
        if first_late is not None:  # (x + delay is monotone in x: none passes the second test)
            return first_late
        self.sched.denied = True
        return None

    def _start_beside(self, job: Job, g: Gpu, now: float, need: int, shards: int) -> None:
        """Start ``job`` on busy GPU ``g``; remember its neighbours' speeds just before (the
        contention watch compares with them) and what the rule predicted for the pack."""
        base = {x.id: x.rate for x in g.jobs}
        if self.guesses is not None:
            self.guesses.packed(job)
        self.cluster.start_shared(job, g, now, need, shards)
        job.pack_base = base
        if self.cfg.pair_predict:
            job.pack_pred = self.watch.predict(g)



def _unit(speed: float) -> float:
    """A predicted speed as the admission rule takes it (a model may stray past [0, 1])."""
    return min(1.0, max(0.0, speed))
