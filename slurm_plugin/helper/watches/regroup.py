"""Regrouping live: free whole GPUs for the head of the queue by moving packed jobs.

When the job Slurm would start next wants whole GPUs and has waited `[monitor]
regroup_head_wait_s` while the room exists only in pieces (packed jobs spread over GPUs), the
watch asks `packer.regroup.plan_regroup` (`ctx.rules.regroup`, the planner the simulator uses) for a plan over
the cluster as Slurm shows it (`watches/regroup_view.py`). Only jobs that declared they can be
moved are touched, the moves are bounded per plan and per sliding hour (`MoveBudget`,
`regroup_moves_per_plan`, `regroup_moves_per_hour`), and a plan runs only when the head's
earlier start beats the moves' cost. When enforced, each move is:

1. `regroup-signal`: the job's checkpoint signal, `scancel --signal=USR1 --batch JOB` (a
   signal, never a cancel); a job that declared no signal but reports its checkpoints to
   the node agent gets `regroup-wait` instead (it is waited for, not signalled);
2. `regroup-requeue`: as soon as the job reports a checkpoint taken after the signal (its
   own report through the node agent, `checkpoint_reports.py`), else after the signal's
   grace time T (`--signal=B:USR1@T`; the time Slurm itself would give it); a report-only
   job at its next reported checkpoint, at the latest by the boundary its period predicts
   (the model's wait, `Movability.timing`) plus `REPORT_SLACK_S`. The job is requeued at the
   head of the queue with the freed GPUs' node in its ExcNodeList, so it restarts elsewhere
   from its checkpoint; the event says what it waited for (`waited`);
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
from slurm_plugin.helper.watches.checkpoint_reports import CheckpointReports
from slurm_plugin.helper.watches.regroup_view import CheckpointSignals, cluster_view, head_of_queue, head_view
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)

KIND = "regroup"
SIGNAL_KIND = "regroup-signal"
REQUEUE_KIND = "regroup-requeue"
HEAD_START_KIND = "regroup-head-start"
WAIT_KIND = "regroup-wait"
# a report-only job's report may reach the helper this long after the boundary it predicts
# (the agent's sample, the next round)
REPORT_SLACK_S = 5.0


@dataclass(frozen=True)
class PendingMove:
    """A job asked to checkpoint (`waits_on`: "signal", "report", or "none"), requeued away
    from `avoid_node` when it reports a checkpoint taken after `asked_at`, else at `due`."""

    job_id: int
    head_job: int
    avoid_node: str
    due: float
    run_start: float
    reason: str
    asked_at: float = 0.0
    waits_on: str = "none"


class RegroupWatch:
    name = "regroup"

    def __init__(self) -> None:
        self.budget: MoveBudget | None = None
        self._now = 0.0
        self._signals: CheckpointSignals | None = None
        self._said: set[tuple[int, str]] = set()
        self.pending: dict[int, PendingMove] = {}
        self.heads: dict[int, str] = {}  # head job -> the GPUs freed for it, until it starts
        self.reports = CheckpointReports()

    def job_maps(self) -> list:
        """What it remembers per job (`round.KeepsJobs`); the checkpoint reports keep the
        running jobs' alone."""
        return [self._said, self.pending, self.heads, *(self._signals.job_maps() if self._signals is not None else [])]

    def round(self, ctx: RoundContext) -> None:
        mode = ctx.actions.mode_of(KIND)
        self._now = ctx.now
        self.reports.update(ctx.samples)
        self.reports.keep_only({j for j, job in ctx.jobs.items() if job.state == "RUNNING"})
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
                            max_shards(ctx.config), head=head,
                            report_of=lambda job: self.reports.of(job.job_id, _run_start(job, ctx.now)))
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
            wait, waits_on = self._ask_checkpoint(ctx, job, m.wait_s, m.reason, head.job_id, run_start)
            ctx.acted.add(m.job_id)
            self.pending[m.job_id] = PendingMove(m.job_id, head.job_id, avoid, ctx.now + wait, run_start, m.reason,
                                                 ctx.now, waits_on)
        self._requeue_due(ctx, mode)  # moves with nothing to wait for go now

    def _ask_checkpoint(self, ctx: RoundContext, job: Job, wait: float, reason: str, head_job: int,
                        run_start: float) -> tuple[float, str]:
        """Signal the job to checkpoint, or wait for its next reported checkpoint; (the
        longest wait, what it waits on)."""
        actions = ctx.actions
        spec = self._signals(job) if self._signals is not None else None
        if spec is not None:
            try:
                actions.runner.signal(job.job_id, spec.signal, batch=spec.batch_only)
            except SlurmError as exc:
                actions.log_event(SIGNAL_KIND + "-failed", f"could not signal: {exc}; requeued at once",
                                  job.job_id, head_job=head_job)
                return 0.0, "none"
            actions.log_event(SIGNAL_KIND, f"checkpoint signal {spec.signal} sent; requeued when it reports its "
                              f"checkpoint, at the latest in {wait:.0f}s (its --signal grace time): {reason}",
                              job.job_id, head_job=head_job, signal=spec.signal, grace_s=wait)
            return wait, "signal"
        report = self.reports.of(job.job_id, run_start)
        if report is not None and report.every_s is not None:
            actions.log_event(WAIT_KIND, f"waits for its next checkpoint report (every {report.every_s:.0f}s, "
                              f"expected in {wait:.0f}s): {reason}", job.job_id, head_job=head_job,
                              expected_s=round(wait, 1), every_s=report.every_s)
            return wait + REPORT_SLACK_S, "report"
        return wait, "none"

    def _requeue_due(self, ctx: RoundContext, mode: ActionMode) -> None:
        for job_id, p in list(self.pending.items()):
            job = ctx.jobs.get(job_id)
            if job is None or job.state != "RUNNING":
                self.pending.pop(job_id)  # ended or requeued by someone else: nothing to move
                if job is None or job.is_finished:
                    ctx.actions.log_event(REQUEUE_KIND + "-dropped", f"job {job_id} ended before its move",
                                          job_id, head_job=p.head_job)
                continue
            checkpoint = self._checkpoint_after(p)
            if checkpoint is None and ctx.now < p.due:
                continue
            how, waited = _how_long(p, ctx.now, checkpoint)
            why = (f"moved to free GPUs on {p.avoid_node} for job {p.head_job}; {how} ({p.reason})")
            done = ctx.actions.requeue_at_head(job, REQUEUE_KIND, why, exclude=frozenset({p.avoid_node}),
                                               mode=ActionMode("enforce", mode.label), head_job=p.head_job,
                                               waited=waited, waited_s=round(ctx.now - p.asked_at, 1))
            self.pending.pop(job_id)
            if done:
                ctx.acted.add(job_id)
                ctx.state.kept_off[job_id] = frozenset({p.avoid_node})  # until it starts elsewhere

    def _checkpoint_after(self, p: PendingMove) -> float | None:
        """When the job reported a checkpoint taken after it was asked; None: not yet."""
        if p.waits_on == "none":
            return None
        report = self.reports.of(p.job_id, p.run_start)
        if report is None or report.last_at is None or report.last_at <= p.asked_at:
            return None
        return report.last_at

    def _heads_started(self, ctx: RoundContext) -> None:
        for head_job, frees in list(self.heads.items()):
            job = ctx.jobs.get(head_job)
            if job is None or job.is_finished:
                self.heads.pop(head_job)
            elif job.state == "RUNNING":
                self.heads.pop(head_job)
                ctx.actions.log_event(HEAD_START_KIND, f"job {head_job} runs on {job.nodes} after regrouping "
                                      f"(freed {frees})", head_job, nodes=job.nodes, frees=frees)


def _how_long(p: PendingMove, now: float, checkpoint: float | None) -> tuple[str, str]:
    """What the requeue waited for, in words and as a keyword (the event's `waited`)."""
    if checkpoint is not None:
        return (f"requeued {max(0.0, now - checkpoint):.0f}s after its checkpoint report "
                f"({checkpoint - p.asked_at:.0f}s after the {'signal' if p.waits_on == 'signal' else 'decision'})",
                "checkpoint-report")
    if p.waits_on == "signal":
        return f"requeued after the signal's grace time {p.due - p.asked_at:.0f}s (no checkpoint report)", "grace-time"
    if p.waits_on == "report":
        return (f"no checkpoint report by its expected boundary: requeued {now - p.asked_at:.0f}s after the "
                "decision, losing the work since its last checkpoint", "report-overdue")
    return "requeued at once (nothing to wait for)", "nothing"


def _run_start(job: Job, now: float) -> float:
    return job.start_time.timestamp() if job.start_time else now


def _evidence(plan: RegroupPlan) -> dict[str, object]:
    return {"plan": plan.kind, "frees": ",".join(f"{n}:{i}" for n, i in sorted(plan.frees)),
            "moves": [m.job_id for m in plan.moves], "gain_s": round(plan.gain(), 1),
            "cost_s": round(plan.cost(), 1), "lost_work_s": round(plan.lost_work_s, 1),
            "head_start_without": round(plan.head_start_without, 1),
            "head_start_with": round(plan.head_start_with, 1)}
