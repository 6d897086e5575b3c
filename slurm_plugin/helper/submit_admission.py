"""The submit path's load-aware admission (issue 26, item 1): a job the packer would pack is
packed only where the pack pays given the queue (``SuiteRules.judge_pack``, the replay's rule).

Everything it reads is at hand without Slurm: the queue and the shared GPUs come from the
cluster view the watcher published (``QueueState``), the jobs' traits and the pairs learned
from the history store (two indexed reads). It fails open: no view, a view without the queue,
or any error leaves the packer's decision as it was (the watches still guard the pack).

With a whole GPU idle in the view (`[packer] pack_only_when_no_idle_gpu = false`) there is
nothing to judge: the job may start there (the steering keeps it off avoided partners and
slow pairs). Otherwise, what it asks of the rule:

- the newcomer: its packed size (shards x share), its mean utilisation from history, and its
  work as the mean length of its recent runs (unknown: no bound from its side);
- each shared GPU (``node:index``), its packed jobs at their shards' share of the memory,
  with their work left by their time limits;
- the queue: the jobs waiting (all ahead of the newcomer: it is the last one in), the GPUs,
  and when a whole GPU would free for it (the ``waiting + 1``-th release);
- pair speeds: measured ones with the newcomer (the store's ``pair_speeds``), else predicted
  from both jobs' history (``PairKnowledge``); a pair with no prediction is taken at full
  speed (no evidence against it, as the steering does), a pair to avoid is never packed.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import replace

from packer.admission import PackJudgement, QueueView, release_wait
from packer.corunner import GpuLoad, Newcomer, RunningJob
from packer.decision import Decision
from packer.pair_knowledge import JobTraits, PairKnowledge
from packer.rules import SuiteRules
from packer.store import Store
from slurm_plugin.helper.cluster_view import Snapshot, idle_gpus
from slurm_plugin.helper.queue_state import QueueState

log = logging.getLogger(__name__)


def _gpus(queue: QueueState, share_bytes: float, capacity: int,
          traits: dict[str, JobTraits]) -> tuple[list[GpuLoad], dict[str, float]]:
    loads, left = [], {}
    for g in queue.shared:
        jobs = []
        for j in g.jobs:
            fp = j.fingerprint or f"job{j.job_id}"
            t = traits.get(fp)
            jobs.append(RunningJob(str(j.job_id), fp, int(j.shards * share_bytes), t.util_pct if t else None))
            left[str(j.job_id)] = math.inf if j.left_s is None else j.left_s
        loads.append(GpuLoad(g.gpu_id, capacity, tuple(jobs)))
    return loads, left


def judge(rules: SuiteRules, store: Store, snapshot: Snapshot | None, decision: Decision,
          now: float) -> PackJudgement | None:
    """The rule's judgement of packing ``decision``'s job now; None when there is nothing to
    judge by (no view or no queue in it, or not a pack)."""
    if decision.verdict != "packed" or not decision.fingerprint or snapshot is None or snapshot.queue is None:
        return None
    if idle_gpus(snapshot) > 0:  # it may start on an idle GPU: no one is made to wait or slow down
        return None
    queue, fp, config = snapshot.queue, decision.fingerprint, rules.config
    resident_fps = {j.fingerprint for g in queue.shared for j in g.jobs if j.fingerprint}
    ests = store.estimates(resident_fps | {fp}, config.history_window)
    traits = {f: JobTraits.from_history(e.mean_util_pct, e.peak_mem_bytes)
              for f, e in ests.items() if e.mean_util_pct is not None}
    capacity = int(config.gpu_memory_gib * 2**30)
    gpus, left = _gpus(queue, config.share_bytes, capacity, traits)
    know = PairKnowledge(traits, store.pair_speeds_with(fp))
    own = traits.get(fp)
    newcomer = Newcomer("new", fp, int((decision.shards or 1) * config.share_bytes), own.util_pct if own else None)
    partners = store.avoided_with(fp)
    elapsed = max(0.0, now - snapshot.taken_at)
    wait = max(0.0, release_wait(queue.releases_s, queue.waiting) - elapsed)
    view = QueueView(waiting=0, gpus=max(1, queue.gpus), wait_s=wait)
    work = store.mean_run_s(fp, config.history_window)

    def speed(a: str, b: str) -> float:
        s = know.speed(a, b)
        return 1.0 if s is None else min(1.0, max(0.0, s))

    return rules.judge_pack(newcomer, math.inf if work is None else work, gpus, left, view,
                            lambda a, b: (b if a == fp else a) in partners, speed)


def load_aware(rules: SuiteRules, store: Store, snapshot: Callable[[], Snapshot | None],
               decision: Decision, now: float) -> Decision:
    """``decision`` as the load-aware rule leaves it: a pack the rule refuses keeps its whole
    GPU (reason ``pack-does-not-pay``, ``below-min-speed`` or ``avoided-pair``). Fails open."""
    if rules.admission != "load-aware" or decision.verdict != "packed":
        return decision
    try:
        verdict = judge(rules, store, snapshot(), decision, now)
    except Exception:  # a refinement of the decision: never fail the submission for it
        log.exception("load-aware admission failed; the packer's decision stands")
        return decision
    if verdict is None or not verdict.refused:
        return decision
    return replace(decision, verdict="exclusive", reason=verdict.reason, shards=None)
