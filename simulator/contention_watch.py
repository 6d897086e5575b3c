"""colocate's contention watch (the helper's contention rule) in the replay.

``monitor_s`` after a job is packed beside others, the node agent has measured every job's
speed there: the watch records the pack's prediction error (what colocate predicted when it
packed, :meth:`ContentionWatch.predict`, against the speeds now), makes the pair known to
this run's pair knowledge, and asks ``packer.contention.check_contention`` (the run's
``SuiteRules.contention_now``) whether a job
lost more than ``SuiteRules.tolerated_loss`` since the pack; if so the job it names is
requeued (to the head of the queue, its attempt lost) and the pair is avoided from then on.
Otherwise the pack is judged again with the speeds measured (``SuiteRules.pack_pays``, the
admission rule, on the queue as it is now): a pack that no longer pays sends the newcomer
back to the queue's head, without avoiding the pair (with a longer queue it may pay).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

from packer.admission import PackCase, QueueView, ResidentWork
from packer.contention import Sharer
from packer.rules import SuiteRules
from simulator.knowledge import PairKnowledge
from simulator.state import Gpu, Job


class WaitingQueue(Protocol):
    """What the watch reads of the scheduler: the queue's length, and its pass flag."""

    front: deque[Job]
    queue: dict[int, Job]
    dirty: bool


class ContentionWatch:
    def __init__(self, *, know: PairKnowledge, rules: SuiteRules, avoid: set[tuple[str, str]], gpus: Sequence[Gpu],
                 sched: WaitingQueue, requeue: Callable[[Job, float], None], pair_predict: bool,
                 queue_view: Callable[[float, int], QueueView]):
        """``requeue``: take a job off its GPU and put it at the head of the queue;
        ``queue_view``: the queue as the admission rule reads it (the policy's)."""
        self.know, self.rules, self.avoid, self.gpus, self.sched = know, rules, avoid, gpus, sched
        self.requeue, self.pair_predict, self.queue_view = requeue, pair_predict, queue_view

    def predict(self, g: Gpu) -> tuple[dict[int, float], bool]:
        """Each job's speed on ``g`` as the policy predicts it now, and whether every pair
        there was known (not predicted from features)."""
        sp, known = self.know.speed, self.know.known
        preds = {}
        seen = True
        for j in g.jobs:
            r = 1.0
            for o in g.jobs:
                if o is not j:
                    r *= sp(j.profile, o.profile)
                    seen = seen and known(j.profile, o.profile)
            preds[j.id] = r
        return preds, seen

    def check(self, job: Job, now: float) -> None:
        """Has the pre-existing job lost more than the threshold since the pack?

        The agent has now measured both jobs' speeds: the pair is known from here on."""
        know = self.know
        g = self.gpus[job.gpu_ids[0]]
        if len(g.jobs) < 2:
            return
        if job.pack_pred is not None:
            preds, seen = job.pack_pred
            job.pack_pred = None
            for j in g.jobs:
                if j.id in preds:
                    know.error.add(preds[j.id], j.rate, seen)
            if len(g.jobs) == 2:  # a pair: each job's speed is that pair's
                a, b = g.jobs[0].profile, g.jobs[1].profile
                v0 = know.version
                know.observe(a, b)
                know.observe(b, a)
                if know.version != v0:
                    self.sched.dirty = True
        # each job's throughput against what it had just before the newcomer joined (alone:
        # 1.0; with more than two per GPU, what the others there already took)
        base = job.pack_base
        sharers = [Sharer(j.id, j.workload, j.packed_at if j.packed_at is not None
                          and j is job else j.start, base.get(j.id, 1.0), j.rate)
                   for j in g.jobs]
        v = self.rules.contention_now(sharers)
        if v is None:
            if self._still_pays(job, g, base, now):
                return
            victim = job
        else:
            self.avoid.update(v.avoid_pairs)
            victim = next(j for j in g.jobs if j.id == v.newcomer)
        victim.preemptions += 1
        self.requeue(victim, now)  # off its GPU (its attempt lost), at the head of the queue

    def _still_pays(self, job: Job, g: Gpu, base: dict[int, float], now: float) -> bool:
        """The admission rule on the measured speeds: does keeping ``job`` beside the others
        beat sending it back to wait? (A pair at speed 0 is the pair-failure path's.)"""
        if not self.pair_predict or any(j.rate <= 0.0 for j in g.jobs):
            return True
        others = [j for j in g.jobs if j is not job]
        if not others:
            return True
        case = PackCase(job.left(now), min(1.0, job.rate),
                        tuple(ResidentWork(j.left(now), min(1.0, j.rate / max(base.get(j.id, 1.0), 1e-9)))
                              for j in others))
        sched = self.sched
        return self.rules.pack_pays(case, self.queue_view(now, len(sched.front) + len(sched.queue)))
