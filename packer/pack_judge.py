"""The load-aware admission rule over the GPUs a newcomer could join (issue 26, items 1 and
4): the decision the live helper makes at submit, with the replay's rules. Pure.

The GPUs are the busy, shareable ones (``packer.corunner.GpuLoad``), each job there with its
work left (``left_s``, seconds alone; ``math.inf`` when no end is known). A GPU has room when
the newcomer fits under the cap on the GPU's *total* memory (``max_gpu_fraction``, 95 %) and
the jobs-per-GPU limit, and no job there is a partner it must never share a GPU with
(``avoid``: pairs learned from a failure or a slowdown). Among those with room, the GPUs that
qualify keep every job at the fairness floor (``SuiteRules.corunners`` with the pair
prediction); the pack pays on one of them when ``SuiteRules.pack_pays`` says so (gain > 0
given the queue). The best such GPU by the co-runner rule is named.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from packer.admission import PackCase, PackJudgement, QueueView, Resident
from packer.corunner import AvoidSet, GpuLoad, Newcomer, PairSpeed, rank_corunners

if TYPE_CHECKING:
    from packer.rules import SuiteRules

# a job with no end in sight is taken as running this long (the overlap's bound); finite so
# the rule's arithmetic stays finite (inf * 0 is nan)
NO_END_S = 30 * 86400.0


def _unit(speed: float) -> float:
    return min(1.0, max(0.0, speed))


def _finite(seconds: float) -> float:
    return NO_END_S if math.isinf(seconds) or seconds > NO_END_S else max(0.0, seconds)


def judge_pack(rules: "SuiteRules", newcomer: Newcomer, newcomer_s: float, gpus: Sequence[GpuLoad],
               left_s: dict[str, float], queue: QueueView, avoid: AvoidSet,
               pair_speed: PairSpeed) -> PackJudgement:
    """Whether packing ``newcomer`` (``newcomer_s`` seconds of work alone, ``math.inf``:
    unknown) now pays on one of ``gpus``; ``left_s``: each running job's work left by job id
    (a job missing: no end known)."""
    busy = [g for g in gpus if g.jobs]
    room = rank_corunners(newcomer, busy, rule="lowest-util", max_fraction=rules.config.max_gpu_fraction,
                          max_jobs_per_gpu=rules.max_jobs_per_gpu)
    if not room:
        return PackJudgement("no-room", "no busy GPU has room under the cap and the jobs-per-GPU limit")
    allowed = rank_corunners(newcomer, [r.gpu for r in room], rule="lowest-util",
                             max_fraction=rules.config.max_gpu_fraction,
                             max_jobs_per_gpu=rules.max_jobs_per_gpu, avoid=avoid)
    if not allowed:  # never beside them: the submit path keeps it off their nodes (pair avoidance)
        return PackJudgement("no-room", "avoided-pair")
    ranked = rules.corunners(newcomer, [r.gpu for r in allowed], avoid=avoid, pair_speed=pair_speed)
    if not ranked:
        return PackJudgement("refused", "below-min-speed")
    best_gain = -math.inf
    for r in ranked:
        case = PackCase(_finite(newcomer_s), _unit(r.mine),
                        tuple(Resident(_finite(left_s.get(j.job_id, math.inf)), _unit(s))
                              for j, s in zip(r.gpu.jobs, r.theirs)))
        if rules.pack_pays(case, queue):
            return PackJudgement("pays", "pays", r.gpu.gpu_id, rules.pack_gain(case, queue))
        best_gain = max(best_gain, rules.pack_gain(case, queue))
    return PackJudgement("refused", "pack-does-not-pay", gain=best_gain)
