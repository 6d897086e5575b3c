"""The outcomes of the actions that move jobs: grow by preemption and regrouping, judged
from what happened next (`packer.action_outcomes.judge_growth`, `judge_head_start`).
`OutcomeWatch` (`watches/outcomes.py`) closes the ledger rows with what these return.

- grow-preempt: the grown run (shadow: the run the decision was about, left alone;
  enforce, or a grower that waited in the queue: its next run) against its old share, and
  each evicted job: did it start again after the eviction?
- regroup: the head job the plan was for, against the plan's expected start
  (`head_start_with` in the row's evidence) plus `[monitor] regroup_start_slack_s` (Slurm
  starts the head at its next scheduling pass).
"""
from __future__ import annotations

from store.ledger import ActionLedger, LedgerRow
from packer.action_outcomes import UNKNOWN, Judgement, judge_growth, judge_head_start
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.tracks import ACTIVE, Track
from slurm_plugin.slurm.model import Job

SAME_RUN_S = 0.5  # two starts closer than this are one run (as the other watches count)


def run_peak(track: Track) -> int:
    return max((max(s.peak_mem_bytes, s.mem_bytes) for s in track.samples), default=0)


def started_since(ctx: RoundContext, job_id: int, since: float) -> bool | None:
    """Whether `job_id` started a run after `since`: True; False when it ended (or is gone)
    without one; None while it waits in the queue (or its old run is still being requeued)."""
    track = ctx.tracks.get(job_id)
    if track is not None and track.started_at > since + SAME_RUN_S:
        return True
    job = ctx.jobs.get(job_id)
    if job is None:
        return False
    start = job.start_time.timestamp() if job.start_time else None
    if job.state in ACTIVE:
        return True if start is not None and start > since else None
    if job.is_finished:
        return start is not None and start > since and ran(job)
    return None


def ran(job: Job) -> bool:
    """A finished job ran: a job cancelled while pending gets a start time too, its end time."""
    if job.base_state != "CANCELLED":
        return True
    return job.start_time is not None and job.end_time is not None and job.end_time > job.start_time


def head_start(job: Job | None, decided_at: float, now: float) -> float | None:
    """When the head job started, if it has (Slurm's start time: a pending job's is only a guess)."""
    if job is None or not (job.state in ACTIVE or (job.is_finished and ran(job))):
        return None
    start = job.start_time.timestamp() if job.start_time else now
    return start if start >= decided_at - 1.0 else None


def judge_grow_row(ctx: RoundContext, ledger: ActionLedger, row: LedgerRow) -> Judgement | None:
    old_share = _old_share_bytes(ctx, ledger, row)
    if not old_share:
        return Judgement(UNKNOWN, "no old share in the decision's evidence to judge the growth against")
    job = ctx.jobs.get(row.job_id)
    track = ctx.tracks.get(row.job_id)
    same_run = row.mode == "shadow" and row.data.get("running", True)
    if same_run:
        if track is None or abs(track.started_at - row.run_start) > SAME_RUN_S:
            if job is not None and job.state in ACTIVE:
                return None  # no sample of it this round
            return Judgement(UNKNOWN, "the run ended with no samples left to judge it (helper restarted?)")
    elif track is None or track.started_at <= row.run_start + SAME_RUN_S:
        if job is None or job.is_finished:
            if started_since(ctx, row.job_id, row.run_start):
                return Judgement(UNKNOWN, "the grown run ended before it was sampled")
            return Judgement(UNKNOWN, "the grower did not run again after its restart")
        return None  # waiting for the grown run
    ended = job is None or job.state not in ACTIVE
    evicted = [] if row.mode == "shadow" else [
        (int(v), started_since(ctx, int(v), row.at)) for v in row.data.get("evicted", [])]
    end_state = (job.state if job is not None else "GONE") if ended else None
    return judge_growth(old_share, run_peak(track), end_state, evicted)


def _old_share_bytes(ctx: RoundContext, ledger: ActionLedger, row: LedgerRow) -> float:
    """The share the grower held before it grew: in the row, or (a grower that evicted from
    the queue) in its earlier grow-preempt decision."""
    shards = int(row.data.get("from_shards") or 0)
    if not shards:
        earlier = [r for r in ledger.rows(row.action)
                   if r.job_id == row.job_id and r.id < row.id and int(r.data.get("from_shards") or 0)]
        shards = int(earlier[-1].data["from_shards"]) if earlier else 0
    return shards * ctx.config.share_bytes


def judge_regroup_row(ctx: RoundContext, row: LedgerRow) -> Judgement | None:
    head_id = row.data.get("head_job")
    expected = row.data.get("head_start_with")
    if head_id is None or expected is None:
        return Judgement(UNKNOWN, "no head job or expected start in the decision's evidence")
    head = ctx.jobs.get(int(head_id))
    started = head_start(head, row.at, ctx.now)
    ended = head is None or head.is_finished
    return judge_head_start(row.at, float(expected), ctx.settings.regroup_start_slack_s, started, ended, ctx.now,
                            shadow=row.mode == "shadow")
