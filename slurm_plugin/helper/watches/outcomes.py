"""Outcomes of the run-time actions: each open decision of the action ledger is judged from
what happened next (`packer.action_outcomes`; grow-preempt and regroup rows in
`watches/outcome_moves.py`), and the runs that needed an action but got
none are recorded as misses. Each outcome is also an event (`action-outcome`).

It runs after the tracks are updated and before the history drops the tracks of jobs that
ended, so the run that just ended is still seen. Probes waiting for a neighbour's speed
after a departure live in memory (a restarted helper starts them over).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from store.ledger import ActionLedger, LedgerRow
from packer.action_outcomes import MISSED, RIGHT, UNKNOWN, Judgement, judge_memory_run, judge_recovery, ran_out
from packer.contention import throughput_loss
from packer.oom_restart import KIND as OOM, judge_oom_retry
from slurm_plugin.helper.watches.contention import KIND as CONTENTION
from slurm_plugin.helper.watches.grow import KIND as GROW
from slurm_plugin.helper.watches.memory import KIND as MEMORY, capacity_of
from slurm_plugin.helper.watches.outcome_moves import judge_grow_row, judge_regroup_row, run_peak
from slurm_plugin.helper.watches.regroup import KIND as REGROUP
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.tracks import ACTIVE, Track

log = logging.getLogger(__name__)

GIB = 1024**3


@dataclass
class DepartureProbe:
    """A packed job left a GPU while a senior there ran slower: did the senior speed up?"""

    left_job: int
    left_run: float
    senior: int
    before: float  # the senior's speed before the job arrived
    during: float  # ... and while it was there
    left_at: float


class OutcomeWatch:
    name = "outcomes"

    def __init__(self) -> None:
        self.probes: list[DepartureProbe] = []

    def round(self, ctx: RoundContext) -> None:
        ledger = ctx.actions.ledger
        for row in ledger.open():
            judgement = None
            if row.action == MEMORY:
                judgement = self._judge_memory(ctx, row)
            elif row.action == CONTENTION:
                judgement = self._judge_contention(ctx, ledger, row)
            elif row.action == GROW:
                judgement = judge_grow_row(ctx, ledger, row)
            elif row.action == REGROUP:
                judgement = judge_regroup_row(ctx, row)
            elif row.action == OOM:
                judgement = self._judge_oom(ctx, row)
            if judgement is not None:
                self._close(ctx, ledger, row, judgement)
        self._find_misses(ctx, ledger)

    # ------------------------------------------------------------------ judging decisions
    def _close(self, ctx: RoundContext, ledger: ActionLedger, row: LedgerRow, judgement: Judgement) -> None:
        ledger.close(row.id, judgement.outcome, judgement.detail, ctx.now,
                     event=("action-outcome", f"{row.action} ({row.mode}) was {judgement.outcome}: {judgement.detail}",
                            row.job_id, {"action": row.action, "mode": row.mode, "outcome": judgement.outcome,
                                         "decision": row.id}))

    def _judge_memory(self, ctx: RoundContext, row: LedgerRow) -> Judgement | None:
        """Shadow: the run left alone; enforce: the next run, on the larger size."""
        job = ctx.jobs.get(row.job_id)
        track = ctx.tracks.get(row.job_id)
        capacity = float(row.data.get("capacity_bytes") or 0)
        if row.mode == "shadow":
            if track is None or abs(track.started_at - row.run_start) > 0.5:
                if job is not None and job.state in ACTIVE:
                    return None  # no sample of it this round
                return Judgement(UNKNOWN, "the run ended with no samples left to judge it (helper restarted?)")
        elif track is None or track.started_at <= row.run_start + 0.5:
            if job is None or job.is_finished:
                return Judgement(UNKNOWN, "the job did not run again after its restart")
            return None  # waiting for the next run
        ended = job is None or job.state not in ACTIVE
        return judge_memory_run(capacity, run_peak(track), (job.state if job is not None else "GONE") if ended else None)

    @staticmethod
    def _judge_oom(ctx: RoundContext, row: LedgerRow) -> Judgement | None:
        """restart-oom (`packer.oom_restart.judge_oom_retry`): how the job then ended."""
        job = ctx.jobs.get(row.job_id)
        if job is not None and not job.is_finished:
            return None  # running, or back in the queue after its requeue
        verdict = judge_oom_retry(row.mode, job.base_state if job is not None else "GONE")
        return Judgement(*verdict) if verdict is not None else None

    def _judge_contention(self, ctx: RoundContext, ledger: ActionLedger, row: LedgerRow) -> Judgement | None:
        """Once the newcomer left (shadow: its run ended; enforce: requeued), did the hurt
        neighbours' speed come back?"""
        left_at = row.data.get("left_at")
        if row.mode == "enforce":
            left_at = row.at
        elif left_at is None:
            newcomer = ctx.jobs.get(row.job_id)
            track = ctx.tracks.get(row.job_id)
            still_there = (newcomer is not None and newcomer.state in ACTIVE and track is not None
                           and abs(track.started_at - row.run_start) <= 0.5)
            if still_there:
                if not self._hurt_running(ctx, row):
                    return Judgement(UNKNOWN, "the hurt jobs ended while the newcomer still ran")
                return None
            left_at = ctx.now
            ledger.note(row.id, left_at=left_at)
        settle = float(row.data.get("settle_s", 2.0))
        hurt = []
        for h in row.data.get("hurt", []):
            track = ctx.tracks.get(h["job_id"])
            job = ctx.jobs.get(h["job_id"])
            if track is None or job is None or job.state != "RUNNING":
                continue
            after = [v for at, v in track.throughput() if at >= left_at + settle]
            hurt.append((h["job_id"], float(h["before"]), after))
        return judge_recovery(hurt, float(row.data.get("threshold", 0.1)), int(row.data.get("min_after", 2)))

    @staticmethod
    def _hurt_running(ctx: RoundContext, row: LedgerRow) -> bool:
        return any((j := ctx.jobs.get(h["job_id"])) is not None and j.state in ACTIVE for h in row.data.get("hurt", []))

    # ------------------------------------------------------------------ misses
    def _find_misses(self, ctx: RoundContext, ledger: ActionLedger) -> None:
        ending = [t for t in ctx.tracks.values() if self._ended(ctx, t)]
        for t in ending:
            self._memory_miss(ctx, ledger, t)
            self._start_probes(ctx, ledger, t)
        self._settle_probes(ctx, ledger)

    @staticmethod
    def _ended(ctx: RoundContext, track: Track) -> bool:
        job = ctx.jobs.get(track.job_id)
        return job is None or job.state not in ACTIVE

    def _memory_miss(self, ctx: RoundContext, ledger: ActionLedger, t: Track) -> None:
        capacity = capacity_of(t, ctx.config.share_bytes, ctx.gpu_model) if t.shards else None
        job = ctx.jobs.get(t.job_id)
        state = job.state if job is not None else "GONE"
        if not capacity or not t.samples or not ran_out(run_peak(t), capacity, state):
            return
        if ledger.has(MEMORY, t.job_id, t.started_at):
            return
        detail = (f"ended {state} at {run_peak(t) / GIB:.1f}GiB of its {capacity / GIB:.1f}GiB share "
                  f"with no memory restart decided")
        ledger.record_miss(MEMORY, t.job_id, t.started_at, detail, ctx.now, capacity_bytes=capacity,
                           peak_bytes=run_peak(t))
        ctx.actions.log_event("action-outcome", f"{MEMORY} missed: {detail}", t.job_id, action=MEMORY, outcome=MISSED)

    def _start_probes(self, ctx: RoundContext, ledger: ActionLedger, left: Track) -> None:
        """A packed job left: each senior on its GPU that ran slower by more than the
        threshold while it was there is watched for a recovery."""
        if not left.packed or left.gpu_index < 0 or ledger.has(CONTENTION, left.job_id, left.started_at):
            return
        s = ctx.settings
        for senior in ctx.tracks.values():
            if (senior.job_id == left.job_id or (senior.node, senior.gpu_index) != (left.node, left.gpu_index)
                    or senior.started_at >= left.started_at or self._ended(ctx, senior)):
                continue
            during = [(at, v) for at, v in senior.throughput() if at <= ctx.now]
            m = throughput_loss(during, left.started_at, settle_s=s.settle_s,
                                min_before=s.min_samples_before, min_after=s.min_samples_after)
            if m is not None and m[0] > s.contention_threshold:
                self.probes.append(DepartureProbe(left.job_id, left.started_at, senior.job_id, m[1], m[2], ctx.now))

    def _settle_probes(self, ctx: RoundContext, ledger: ActionLedger) -> None:
        s = ctx.settings
        waiting = []
        for p in self.probes:
            track = ctx.tracks.get(p.senior)
            if track is None or self._ended(ctx, track):
                continue  # the senior ended too: nothing to learn
            after = [v for at, v in track.throughput() if at >= p.left_at + s.settle_s]
            verdict = judge_recovery([(p.senior, p.before, after)], s.contention_threshold, s.min_samples_after)
            if verdict is None:
                waiting.append(p)
            elif verdict.outcome == RIGHT:
                detail = (f"job {p.senior} ran at {p.during:.3g}/s (from {p.before:.3g}/s) beside job {p.left_job} "
                          f"and recovered when it left, with no contention requeue decided")
                ledger.record_miss(CONTENTION, p.left_job, p.left_run, detail, ctx.now, senior=p.senior,
                                   before=p.before, during=p.during, after=sum(after) / len(after))
                ctx.actions.log_event("action-outcome", f"{CONTENTION} missed: {detail}", p.left_job,
                                      action=CONTENTION, outcome=MISSED)
        self.probes = waiting
