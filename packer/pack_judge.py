"""The load-aware admission rule over the GPUs a newcomer could join: the
decision the live helper makes at submit, with the replay's rules. Pure.

The GPUs are the busy, shareable ones (``packer.corunner.GpuLoad``), each job there with its
work left (``left_s``, seconds alone; ``math.inf`` when no end is known). A GPU has room when
the newcomer fits under the cap on the GPU's *total* memory (``max_gpu_fraction``, 95 %) and
the jobs-per-GPU limit, and no job there is a partner it must never share a GPU with
(``avoid``: pairs learned from a failure or a slowdown). Among those with room, the GPUs that
qualify keep every job at the fairness floor (the co-runner rule with the pair prediction,
as ``SuiteRules.corunners`` ranks); the pack pays on one of them when :meth:`JudgeSettings.pays`
says so (gain > 0 given the queue, as ``SuiteRules.pack_pays``). The best such GPU by the
co-runner rule is named.

The judge reads plain settings (:class:`JudgeSettings`, which ``SuiteRules.judge_settings``
builds), never the rules object: the rules call the judge, the judge calls nothing back.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from packer.admission import AdmissionRule, PackCase, PackJudgement, QueueView, ResidentWork, pack_gain
from packer.corunner import AvoidSet, GpuLoad, Newcomer, PairSpeed, RunningJob, rank_corunners


@dataclass(frozen=True)
class JudgeSettings:
    """What the judge reads of the rules, as plain data (``SuiteRules.judge_settings``)."""

    max_fraction: float  # the cap on a GPU's total memory
    max_jobs_per_gpu: int
    corunner_rule: str  # packer.corunner.RULES: the order the GPUs that qualify are tried in
    min_corunner_speed: float  # a job already there keeps at least this share of its speed
    min_newcomer_speed: float  # ... and the newcomer this
    fairness: AdmissionRule | None  # load-aware: a pack pays when together beats one after the
    #                                 other, every job at its min_speed; None (slowdown-bound):
    #                                 the floors decided already, a pair at speed 0 never pays
    max_util_total: float = 0.0  # the cap on a GPU's summed utilisation (packer.util_cap; 0: none)

    def pays(self, case: PackCase, queue: QueueView) -> bool:
        """Whether the pack ``case`` pays given ``queue`` (``SuiteRules.pack_pays``)."""
        if self.fairness is not None:
            return self.fairness.pays(case, queue)
        return case.min_speed > 0.0

# a job with no end in sight is taken as running this long (the overlap's bound); finite so
# the rule's arithmetic stays finite (inf * 0 is nan)
NO_END_S = 30 * 86400.0
MAX_KINDS = 24  # kinds of GPU ranked with the pair prediction per submission
MAX_CASES = 48  # packs weighed per submission


def _unit(speed: float) -> float:
    return min(1.0, max(0.0, speed))


def _finite(seconds: float) -> float:
    return NO_END_S if math.isinf(seconds) or seconds > NO_END_S else max(0.0, seconds)


Kinds = dict[tuple, list[GpuLoad]]


def kinds_of(gpus: Sequence[GpuLoad]) -> Kinds:
    """The busy GPUs grouped by what the rule sees of them but the work left: the same jobs'
    workloads, memory and utilisation on the same capacity (ranked once per kind); a caller
    judging many newcomers against one view groups them once."""
    out: dict[tuple, list[GpuLoad]] = {}
    for g in gpus:
        if not g.jobs:
            continue
        jobs = tuple(sorted(g.jobs, key=_job_key))  # one order per kind: speeds ranked once apply to all
        out.setdefault((g.capacity_bytes, tuple(map(_job_key, jobs))), []).append(GpuLoad(g.gpu_id, g.capacity_bytes, jobs))
    return out


def _job_key(j: RunningJob) -> tuple:
    return (j.workload, j.mem_bytes, j.util_pct or 0.0)


def judge_pack(settings: JudgeSettings, newcomer: Newcomer, newcomer_s: float, gpus: Sequence[GpuLoad] | Kinds,
               left_s: dict[str, float], queue: QueueView, avoid: AvoidSet,
               pair_speed: PairSpeed) -> PackJudgement:
    """Whether packing ``newcomer`` (``newcomer_s`` seconds of work alone, ``math.inf``:
    unknown) now pays on one of ``gpus``; ``left_s``: each running job's work left by job id
    (a job missing: no end known); ``gpus`` may come grouped (:func:`kinds_of`). The submit
    path holds slurmctld's locks: the GPUs are weighed by kind, at most ``MAX_KINDS`` kinds (the least used first) and
    ``MAX_CASES`` packs, the best by the co-runner rule first; none of those paying is a refusal."""
    cap, limit = settings.max_fraction, settings.max_jobs_per_gpu
    grouped = gpus if isinstance(gpus, dict) else kinds_of(gpus)
    kinds = {k: group for k, group in grouped.items()
             if len(group[0].jobs) < limit and group[0].used_bytes + newcomer.mem_bytes <= cap * group[0].capacity_bytes}
    if not kinds:
        return PackJudgement("no-room", "no busy GPU has room under the cap and the jobs-per-GPU limit")
    firsts = sorted((group[0] for group in kinds.values()), key=lambda g: (g.used_bytes, g.gpu_id))[:MAX_KINDS]
    allowed = rank_corunners(newcomer, firsts, rule="lowest-util", max_fraction=cap, max_jobs_per_gpu=limit,
                             avoid=avoid)
    if not allowed:  # never beside them: the submit path keeps it off their nodes (pair avoidance)
        return PackJudgement("no-room", "avoided-pair")
    ranked = rank_corunners(newcomer, [r.gpu for r in allowed], rule=settings.corunner_rule, max_fraction=cap,
                            max_jobs_per_gpu=limit, avoid=avoid, pair_speed=pair_speed,
                            min_corunner_speed=settings.min_corunner_speed,
                            min_newcomer_speed=settings.min_newcomer_speed, max_util_total=settings.max_util_total)
    if not ranked:
        return PackJudgement("refused", "below-min-speed")
    by_first = {id(group[0]): group for group in kinds.values()}
    cases = 0
    for r in ranked:
        for g in by_first[id(r.gpu)]:
            case = PackCase(_finite(newcomer_s), _unit(r.mine),
                            tuple(ResidentWork(_finite(left_s.get(j.job_id, math.inf)), _unit(s))
                                  for j, s in zip(g.jobs, r.theirs)))
            if settings.pays(case, queue):
                return PackJudgement("pays", "pays", g.gpu_id, pack_gain(case, queue))
            cases += 1
            if cases >= MAX_CASES:
                return PackJudgement("refused", "pack-does-not-pay")
    return PackJudgement("refused", "pack-does-not-pay")
