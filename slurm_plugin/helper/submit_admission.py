"""The submit pipeline's `load-aware` stage: a job the packer would pack is packed only where
the pack pays given the queue (``SuiteRules.judge_pack``, the replay's rule).

Everything it reads is at hand without Slurm: the queue and the shared GPUs come from the
cluster view the watcher published (``QueueState``), the jobs' traits and the pairs learned
from the history store (indexed reads, each once: the job's own through its
``SubmitContext``). It fails open: no view, a view without the queue, or any error (the
pipeline's runner) leaves the packer's decision as it was (the watches still guard the pack).

With a whole GPU idle in the view (`[packer] pack_only_when_no_idle_gpu = false`) there is
nothing to judge: the job may start there (the steering keeps it off avoided partners and
slow pairs). Otherwise, what it asks of the rule:

- the newcomer: its packed size (shards x share), its mean utilisation from history, and its
  work as the mean length of its recent runs (unknown: no bound from its side);
- each shared GPU (``node:index``), its packed jobs at their shards' share of the memory,
  with their work left by their time limits;
- the queue: the jobs waiting (all ahead of the newcomer: it is the last one in), the GPUs,
  and when a whole GPU would free for it (the ``waiting + 1``-th release);
- pair speeds with their spread (``SuiteRules.pair_predictor``, the replay's ``counters``
  knowledge): measured ones (the store's ``pair_speeds``) as measured, else the pair model
  (``packer.pair_model``) fitted on the measured pairs from each workload's counters alone
  as the agent records them (mean GPU utilisation, peak memory: the store's estimates), an
  unmeasured pair judged at its upper bound (``PairPredictor.trial_speed``: tried unless
  the model is sure it is too slow; the watches requeue it on its measured speed). A pair
  with a workload whose utilisation is unknown has no prediction (the GPU does not qualify
  under a fairness floor); a pair to avoid is never packed beside.

The residents (the shared GPUs' jobs, their utilisation and work left) and the pair model
(every measured pair and its workloads' estimates, one fit) are built once per published
view; each submission then asks the store three indexed questions of its own workload
(measured pairs here; partners to avoid and mean run length through its context, which the
`avoid-partners` stage reads the partners from too).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from packer.admission import PackJudgement, QueueView, release_wait
from packer.corunner import GpuLoad, Newcomer, RunningJob
from packer.pack_judge import Kinds, kinds_of
from packer.pair_model import AloneCounters
from packer.pair_predictor import PairPredictor
from packer.decision import Decision
from packer.rules import SuiteRules
from store.db import Store
from slurm_plugin.helper.cluster_view import Snapshot, idle_gpus
from slurm_plugin.helper.submit_context import SubmitContext


@dataclass
class _Residents:
    """The shared GPUs of one published view, as the rule reads them (built once per view:
    the submit path must stay fast)."""

    taken_at: float
    gpus: Kinds  # the busy shared GPUs, by kind (packer.pack_judge.kinds_of)
    left: dict[str, float]
    fingerprints: frozenset[str]
    pairs: PairPredictor[str]
    rules: SuiteRules | None = None  # what they were built with (a reloaded config builds them again)


def _unit(speed: float) -> float:
    return min(1.0, max(0.0, speed))  # a measured ratio a little over 1 is noise: as fast as alone


def counters(estimate) -> AloneCounters | None:
    """A workload's counters alone from its history estimate (None: no utilisation known)."""
    if estimate is None or estimate.mean_util_pct is None:
        return None
    return AloneCounters.from_history(estimate.mean_util_pct, estimate.peak_mem_bytes)


def pair_predictor_of(store: Store, rules: SuiteRules, fps: set[str], since: float) -> PairPredictor[str]:
    """The pair model of the store (the submit path's, per view, and the steering's, per
    round): every measured pair, fitted on its workloads' counters; `fps` have counters too."""
    measured = {k: _unit(p.speed) for k, p in store.pairs.pair_speeds().items()}
    keys = fps | {f for pair in measured for f in pair}
    solo = {f: c for f, e in store.estimates(keys, rules.config.history_window, since=since).items()
            if (c := counters(e)) is not None}
    return rules.pair_predictor(solo, measured)


def _residents(store: Store, snapshot: Snapshot, rules: SuiteRules, now: float) -> _Residents:
    queue, config = snapshot.queue, rules.config
    assert queue is not None
    fps = {j.fingerprint for g in queue.shared for j in g.jobs if j.fingerprint}
    utils = {f: e.mean_util_pct for f, e in store.estimates(fps, config.history_window).items()}
    capacity = int(config.gpu_memory_gib * 2**30)
    loads, left = [], {}
    for g in queue.shared:
        jobs = []
        for j in g.jobs:
            fp = j.fingerprint or f"job{j.job_id}"
            jobs.append(RunningJob(str(j.job_id), fp, int(j.shards * config.share_bytes), utils.get(fp)))
            left[str(j.job_id)] = math.inf if j.left_s is None else j.left_s
        loads.append(GpuLoad(g.gpu_id, capacity, tuple(jobs)))
    pairs = pair_predictor_of(store, rules, fps, config.history_since(now))
    return _Residents(snapshot.taken_at, kinds_of(loads), left, frozenset(fps), pairs, rules)


class LoadAwareAdmission:
    """The `load-aware` stage, with the view's residents kept between submissions until a
    newer view is published."""

    name = "load-aware"

    def __init__(self) -> None:
        self._residents: _Residents | None = None
        self._idle: tuple[float, int] = (-1.0, 0)  # (view taken at, whole GPUs idle in it)

    def prepare(self, snapshot: Snapshot, store: Store, rules: SuiteRules, now: float) -> None:
        """Build what this stage reads of ``snapshot`` (its idle GPUs, the residents and their
        pair model) before a submission asks: the view's loader calls it off the request path
        on each new view. A submission finding none for its view builds them itself."""
        if snapshot.queue is None or rules.admission != "load-aware":
            return
        idle = idle_gpus(snapshot)
        residents = _residents(store, snapshot, rules, now) if idle == 0 else None
        self._idle = (snapshot.taken_at, idle)
        if residents is not None:
            self._residents = residents

    def judge(self, decision: Decision, ctx: SubmitContext) -> PackJudgement | None:
        """The rule's judgement of packing ``decision``'s job now; None when there is nothing
        to judge by (no view or no queue in it, a GPU idle, or not a pack)."""
        if decision.verdict != "packed" or not decision.fingerprint:
            return None
        snapshot = ctx.snapshot
        if snapshot is None or snapshot.queue is None:
            return None
        if self._idle[0] != snapshot.taken_at:
            self._idle = (snapshot.taken_at, idle_gpus(snapshot))
        if self._idle[1] > 0:  # it may start on an idle GPU: no one is made to wait or slow down
            return None
        queue, fp, rules, store, now = snapshot.queue, decision.fingerprint, ctx.rules, ctx.store, ctx.now
        res = self._residents
        if res is None or res.taken_at != snapshot.taken_at or res.rules is not rules:
            res = self._residents = _residents(store, snapshot, rules, now)
        est = decision.estimate
        newcomer = Newcomer("new", fp, int((decision.shards or 1) * rules.config.share_bytes),
                            est.mean_util_pct if est is not None else None)
        observed = {k: _unit(v) for k, v in store.pairs.pair_speeds_with(fp, res.fingerprints).items()}
        pairs = res.pairs.including(fp, counters(est), observed)
        partners = ctx.partners
        wait = max(0.0, release_wait(queue.releases_s, queue.waiting) - max(0.0, now - snapshot.taken_at))
        view = QueueView(waiting=0, gpus=max(1, queue.gpus), wait_s=wait)
        work = ctx.mean_run_s
        return rules.judge_pack(newcomer, math.inf if work is None else work, res.gpus, res.left, view,
                                lambda a, b: (b if a == fp else a) in partners, pairs.trial_speed)

    def __call__(self, decision: Decision, ctx: SubmitContext) -> Decision:
        """``decision`` as the load-aware rule leaves it: a pack the rule refuses keeps its
        whole GPU (reason ``pack-does-not-pay`` or ``below-min-speed``)."""
        if ctx.rules.admission != "load-aware" or decision.verdict != "packed":
            return decision
        verdict = self.judge(decision, ctx)
        if verdict is None or not verdict.refused:
            return decision
        return replace(decision, verdict="exclusive", reason=verdict.reason, shards=None)
