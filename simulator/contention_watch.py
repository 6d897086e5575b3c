"""colocate's contention watch (the helper's contention rule) in the replay.

``monitor_s`` after a job is packed beside others, the node agent has measured every job's
speed there: the watch records the pack's prediction error (what colocate predicted when it
packed, :meth:`ContentionWatch.predict`, against the speeds now), makes the pair known to
this run's pair knowledge, and asks ``packer.contention.check_contention`` (the run's
``SuiteRules.contention_now``) whether a job
lost more than ``SuiteRules.fig4_threshold`` since the pack; if so the job it names is
requeued (to the head of the queue, its attempt lost) and the pair is avoided from then on.
Otherwise the pack is judged again with the speeds measured (``SuiteRules.pack_pays``, the
admission rule, on the queue as it is now): a pack that no longer pays sends the newcomer
back to the queue's head, without avoiding the pair (with a longer queue it may pay).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from packer.admission import PackCase, ResidentWork
from packer.contention import Sharer

if TYPE_CHECKING:
    from simulator.engine import Simulator
    from simulator.state import Gpu, Job


class ContentionWatch:
    def __init__(self, sim: "Simulator"):
        self.sim = sim

    def predict(self, g: Gpu) -> tuple[dict[int, float], bool]:
        """Each job's speed on ``g`` as the policy predicts it now, and whether every pair
        there was known (not predicted from features)."""
        sim = self.sim
        sp, known = sim.know.speed, sim.know.known
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
        """FIG. 4: has the pre-existing job lost more than the threshold since the pack?

        The agent has now measured both jobs' speeds: the pair is known from here on."""
        sim = self.sim
        g = sim.gpus[job.gpu_ids[0]]
        if len(g.jobs) < 2:
            return
        if job.pack_pred is not None:
            preds, seen = job.pack_pred
            job.pack_pred = None
            for j in g.jobs:
                if j.id in preds:
                    sim.know.error.add(preds[j.id], j.rate, seen)
            if len(g.jobs) == 2:  # a pair: each job's speed is that pair's
                a, b = g.jobs[0].profile, g.jobs[1].profile
                v0 = sim.know.version
                sim.know.observe(a, b)
                sim.know.observe(b, a)
                if sim.know.version != v0:
                    sim.sched.dirty = True
        # each job's throughput against what it had just before the newcomer joined (alone:
        # 1.0; with more than two per GPU, what the others there already took)
        base = job.pack_base
        sharers = [Sharer(j.id, j.workload, j.packed_at if j.packed_at is not None
                          and j is job else j.start, base.get(j.id, 1.0), j.rate)
                   for j in g.jobs]
        v = sim.rules.contention_now(sharers)
        if v is None:
            if self._still_pays(job, g, base, now):
                return
            victim = job
        else:
            sim.avoid.update(v.avoid_pairs)
            victim = next(j for j in g.jobs if j.id == v.newcomer)
        victim.preemptions += 1
        sim.stop(victim, now)
        sim.sched.requeue(victim, now)

    def _still_pays(self, job: Job, g: Gpu, base: dict[int, float], now: float) -> bool:
        """The admission rule on the measured speeds: does keeping ``job`` beside the others
        beat sending it back to wait? (A pair at speed 0 is the pair-failure path's.)"""
        sim = self.sim
        if not sim.cfg.pair_predict or any(j.rate <= 0.0 for j in g.jobs):
            return True
        others = [j for j in g.jobs if j is not job]
        if not others:
            return True
        case = PackCase(job.left(now), min(1.0, job.rate),
                        tuple(ResidentWork(j.left(now), min(1.0, j.rate / max(base.get(j.id, 1.0), 1e-9)))
                              for j in others))
        sched = sim.sched
        return sim.rules.pack_pays(case, sim.policy.queue_view(now, len(sched.front) + len(sched.queue)))
