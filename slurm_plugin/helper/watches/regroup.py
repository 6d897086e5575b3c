"""Regrouping (patent seed 002) live: free whole GPUs for the head of the queue by moving packed jobs.

When the job Slurm would start next wants whole GPUs and has waited `[monitor]
regroup_head_wait_s` while the room exists only in pieces (packed jobs spread over GPUs), the
watch asks `packer.regroup.plan_regroup` (`ctx.rules.regroup`, the planner the simulator uses) for a plan over
the cluster as Slurm shows it (`watches/regroup_view.py`). Only jobs that declared they can be
moved are touched, the moves are bounded per plan and per sliding hour (`MoveBudget`,
`regroup_moves_per_plan`, `regroup_moves_per_hour`), and a plan runs only when the head's
earlier start beats the moves' cost. When enforced, each move is:

1. `regroup-signal`: the job's checkpoint signal, `scancel --signal=USR1 --batch JOB` (a
   signal, never a cancel);
2. `regroup-requeue`: after the signal's grace time T (`--signal=B:USR1@T`; the time Slurm
   itself would give it), the job is requeued at the head of the queue with the freed GPUs'
   node in its ExcNodeList, so it restarts elsewhere from its checkpoint;
3. `regroup-head-start`: the head job runs on the freed GPUs.

A plan the watch does not run is a `regroup-skip` event (once per head and reason). The action
kind `regroup` is off | shadow | enforce; in shadow the plan is an event (`regroup-plan`,
shadow) and an action-ledger row per move, nothing is signalled and the budget is not spent.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from packer.action_modes import ActionMode
from packer.decision import max_shards
from packer.regroup import PLAN_KIND, SKIP_KIND, RegroupDecision
from packer.regroup_budget import MoveBudget
from packer.regroup_plan import RegroupPlan
from slurm_plugin.helper.watches.regroup_view import CheckpointSignals, cluster_view, head_of_queue, head_view
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)

KIND = "regroup"
SIGNAL_KIND = "regroup-signal"
REQUEUE_KIND = "regroup-requeue"
HEAD_START_KIND = "regroup-head-start"


@dataclass(frozen=True)
class PendingMove:
    """A job signalled to checkpoint, requeued away from `avoid_node` at `due`."""

    job_id: int
    head_job: int
    avoid_node: str
    due: float
    run_start: float
    reason: str


class RegroupWatch:
    name = "regroup"

    def __init__(self) -> None:
        self.budget: MoveBudget | None = None
        self._now = 0.0
        self._signals: CheckpointSignals | None = None
        self._said: set[tuple[int, str]] = set()
        self.pending: dict[int, PendingMove] = {}
        self.heads: dict[int, str] = {}  # head job -> the GPUs freed for it, until it starts

    def round(self, ctx: RoundContext) -> None:
        mode = ctx.actions.mode_of(KIND)
        self._now = ctx.now
        self._requeue_due(ctx, mode)  # whatever the mode now: a signalled job is not left waiting
        self._heads_started(ctx)
        if mode.mode == "off" or self.pending:
            return
        head = head_of_queue(ctx.jobs, ctx.now, ctx.settings.regroup_head_wait_s)
        if head is None or head.job_id in ctx.acted or head.job_id in self.heads:
            return
        decision = self._plan(ctx, head)
        if decision is None:
            return
        if decision.chosen is None:
            self._skip(ctx, head.job_id, decision.reason, considered=len(decision.considered))
            return
        self._run(ctx, head, decision, mode)

    # ------------------------------------------------------------------ deciding
    def _budget(self, ctx: RoundContext) -> MoveBudget:
        if self.budget is None:
            self.budget = ctx.rules.move_budget(lambda: self._now)
        return self.budget

    def _plan(self, ctx: RoundContext, head: Job) -> RegroupDecision | None:
        runner = ctx.actions.runner
        if self._signals is None:
            self._signals = CheckpointSignals(lambda: ctx.actions.runner)
        try:
            nodes = runner.nodes()
        except SlurmError as exc:
            log.warning("no node list (%s): no regrouping this round", exc)
            return None
        view = cluster_view(nodes, ctx.jobs, ctx.now, ctx.settings, self._signals, ctx.config.shares_per_gpu,
                            max_shards(ctx.config), head=head)
        return ctx.rules.regroup(view, head_view(head, ctx.now), ctx.now, self._budget(ctx))

    def _skip(self, ctx: RoundContext, head_job: int, reason: str, **data: object) -> None:
        if (head_job, reason) in self._said:
            return
        self._said.add((head_job, reason))
        ctx.actions.log_event(SKIP_KIND, f"no regrouping for job {head_job}: {reason}", head_job, **data)

    # ------------------------------------------------------------------ acting
    def _run(self, ctx: RoundContext, head: Job, decision: RegroupDecision, mode: ActionMode) -> None:
        plan = decision.chosen
        assert plan is not None
        evidence = _evidence(plan)
        actions = ctx.actions
        if not mode.acts:
            if (head.job_id, plan.summary()) in self._said:
                return
            self._said.add((head.job_id, plan.summary()))
            actions.log_event(PLAN_KIND, f"would regroup ({mode.label} mode): {plan.summary()}", head.job_id,
                              shadow=True, **evidence)
            for m in plan.moves:
                actions.ledger.record(KIND, m.job_id, _run_start(ctx.jobs[m.job_id], ctx.now), "shadow", m.reason,
                                      ctx.now, head_job=head.job_id, **evidence)
            return
        actions.log_event(PLAN_KIND, plan.summary(), head.job_id, **evidence)
        self._budget(ctx).record(len(plan.moves))
        avoid = plan.frees[0][0]
        self.heads[head.job_id] = evidence["frees"]
        for m in plan.moves:
            job = ctx.jobs[m.job_id]
            run_start = _run_start(job, ctx.now)
            actions.ledger.record(KIND, m.job_id, run_start, "enforce", m.reason, ctx.now, head_job=head.job_id,
                                  **evidence)
            spec = self._signals(job) if self._signals is not None else None
            wait = m.wait_s
            if spec is not None:
                try:
                    actions.runner.signal(m.job_id, spec.signal, batch=spec.batch_only)
                    actions.log_event(SIGNAL_KIND, f"checkpoint signal {spec.signal} sent; requeued in {wait:.0f}s "
                                      f"(its --signal grace time): {m.reason}", m.job_id, head_job=head.job_id,
                                      signal=spec.signal, grace_s=wait)
                except SlurmError as exc:
                    actions.log_event(SIGNAL_KIND + "-failed", f"could not signal: {exc}; requeued at once",
                                      m.job_id, head_job=head.job_id)
                    wait = 0.0
            ctx.acted.add(m.job_id)
            self.pending[m.job_id] = PendingMove(m.job_id, head.job_id, avoid, ctx.now + wait, run_start, m.reason)
        self._requeue_due(ctx, mode)  # moves with nothing to wait for go now

    def _requeue_due(self, ctx: RoundContext, mode: ActionMode) -> None:
        for job_id, p in list(self.pending.items()):
            job = ctx.jobs.get(job_id)
            if job is None or job.state != "RUNNING":
                self.pending.pop(job_id)  # ended or requeued by someone else: nothing to move
                if job is None or job.is_finished:
                    ctx.actions.log_event(REQUEUE_KIND + "-dropped", f"job {job_id} ended before its move",
                                          job_id, head_job=p.head_job)
                continue
            if ctx.now < p.due:
                continue
            why = (f"moved after its checkpoint to free GPUs on {p.avoid_node} for job {p.head_job} "
                   f"({p.reason})")
            done = ctx.actions.requeue_at_head(job, REQUEUE_KIND, why, exclude=frozenset({p.avoid_node}),
                                               mode=ActionMode("enforce", mode.label), head_job=p.head_job)
            self.pending.pop(job_id)
            if done:
                ctx.acted.add(job_id)
                ctx.state.kept_off[job_id] = frozenset({p.avoid_node})  # until it starts elsewhere

    def _heads_started(self, ctx: RoundContext) -> None:
        for head_job, frees in list(self.heads.items()):
            job = ctx.jobs.get(head_job)
            if job is None or job.is_finished:
                self.heads.pop(head_job)
            elif job.state == "RUNNING":
                self.heads.pop(head_job)
                ctx.actions.log_event(HEAD_START_KIND, f"job {head_job} runs on {job.nodes} after regrouping "
                                      f"(freed {frees})", head_job, nodes=job.nodes, frees=frees)


def _run_start(job: Job, now: float) -> float:
    return job.start_time.timestamp() if job.start_time else now


def _evidence(plan: RegroupPlan) -> dict[str, object]:
    return {"plan": plan.kind, "frees": ",".join(f"{n}:{i}" for n, i in sorted(plan.frees)),
            "moves": [m.job_id for m in plan.moves], "gain_s": round(plan.gain(), 1),
            "cost_s": round(plan.cost(), 1), "lost_work_s": round(plan.lost_work_s, 1),
            "head_start_without": round(plan.head_start_without, 1),
            "head_start_with": round(plan.head_start_with, 1)}
