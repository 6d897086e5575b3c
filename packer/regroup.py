"""Regrouping: move a few running jobs so the head of the queue starts sooner (pure planner).

Design note
-----------
Seed 002 (US10884795, IBM) regroups deep-learning jobs on a cluster's accelerators: an
efficiency metric per running job (accelerators used, their spread over hosts, remaining
time) gives a prioritised list; regrouping plans toward a target topology are built from
it, each costed by the scheduler's adjustment cost plus the wait to align with the job's
iteration boundary; the plan with the highest expected gain runs as a timed list of
actions; a user-set threshold bounds the jobs one plan moves.

What this package does with it, for the job at the head of the queue (`HeadJob`) on a
cluster fragmented by packed jobs, MIG slices and spread multi-GPU jobs:

- **metric** (`packer.regroup_score`): `efficiency = pair speed × locality`, waste in
  GPU-seconds over the remaining time; the prioritised list breaks ties between equally
  costly moves toward the least efficient jobs;
- **plans** toward a target topology the head can use: free whole GPUs or whole nodes by
  consolidating packed jobs onto other packed GPUs or moving whole/multi-GPU jobs onto
  fewer nodes (`packer.regroup_whole`), or re-lay MIG slices by moving busy instances to
  other GPUs, with every layout checked by the `mig` state machine (`packer.regroup_mig`);
- **cost vs gain** (`packer.regroup_plan`): per move the work lost since its checkpoint,
  its restart, the requeue latency and its predicted speed change at the new place (pair
  speed, nodes); the gain is the head's earlier start. Compared in JCT-seconds (or
  GPU-seconds, `RegroupSettings.unit`); a plan runs only when its gain beats its cost by
  `min_gain_ratio` and `min_net_s`;
- **bounds** (`packer.regroup_budget.MoveBudget`): moves per plan and per sliding hour,
  with an injected clock;
- **who** (`packer.regroup_model.Movability`): only jobs that declared they can be moved
  (`--requeue` with a checkpoint signal `--signal=B:USR1@T` or checkpoint reports, or an
  admin's partition/QOS setting); the move waits for the checkpoint.

`plan_regroup` returns a `RegroupDecision`: the chosen plan (a timed list of `Action`s:
signal / wait-checkpoint, requeue, restart, head start, each with a reason and an event
kind `regroup-…`) or why nothing is worth doing, with every plan considered. It never
acts, never reads a clock, never spends the budget (the caller records the moves it makes,
in enforce mode only).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from packer.regroup_budget import MoveBudget
from packer.regroup_mig import mig_plans
from packer.regroup_model import Cluster, HeadJob
from packer.regroup_plan import PairSpeed, RegroupPlan, RegroupSettings
from packer.regroup_whole import whole_gpu_plans

log = logging.getLogger(__name__)

PLAN_KIND = "regroup-plan"
SKIP_KIND = "regroup-skip"


@dataclass(frozen=True)
class RegroupDecision:
    head_job: int
    chosen: RegroupPlan | None
    considered: tuple[RegroupPlan, ...]  # best first
    reason: str
    notes: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return PLAN_KIND if self.chosen is not None else SKIP_KIND

    @property
    def moves(self) -> int:
        return len(self.chosen.moves) if self.chosen is not None else 0


def rank(plans: list[RegroupPlan]) -> list[RegroupPlan]:
    """Worth-it plans first, then the largest net gain, fewest moves, least work lost."""
    return sorted(plans, key=lambda p: (not p.worth_it, -p.net, len(p.moves), p.lost_work_s, p.kind, p.head_target))


def plan_regroup(cluster: Cluster, head: HeadJob, now: float, settings: RegroupSettings | None = None,
                 budget: MoveBudget | None = None, *, max_moves: int = 2,
                 pair_speed: PairSpeed | None = None) -> RegroupDecision:
    """The plan to run now for `head`, or why none. `budget` (when given) bounds the moves
    by what is left of its per-plan and per-hour limits; `max_moves` bounds them otherwise."""
    settings = settings or RegroupSettings()
    limit = min(max_moves, budget.remaining()) if budget is not None else max_moves
    if limit <= 0:
        when = budget.next_free_at() if budget is not None else None
        return RegroupDecision(head.job_id, None, (),
                               "move budget spent" + (f" until t={when:.0f}" if when is not None else ""))
    if head.mig_profile is not None:
        plans, notes = mig_plans(cluster, head, now, settings, limit)
    else:
        plans, notes = whole_gpu_plans(cluster, head, now, settings, limit, pair_speed)
    ranked = rank(plans)
    if not ranked:
        reason = notes[0] if notes and "fits now" in notes[0] else "no plan frees room for the head job"
        return RegroupDecision(head.job_id, None, (), reason, tuple(notes))
    best = ranked[0]
    if not best.worth_it:
        u = "JCT-s" if settings.unit == "jct" else "GPU-s"
        reason = (f"best plan not worth it: gain {best.gain():.0f} {u} does not beat cost {best.cost():.0f} {u} "
                  f"by {settings.min_gain_ratio:g}x and {settings.min_net_s:.0f}s ({best.summary()})")
        return RegroupDecision(head.job_id, None, tuple(ranked), reason, tuple(notes))
    log.info("regroup for job %d: %s", head.job_id, best.summary())
    return RegroupDecision(head.job_id, best, tuple(ranked), best.summary(), tuple(notes))
