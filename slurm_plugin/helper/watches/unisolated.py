"""Packed jobs whose isolation failed: never run unisolated, requeued at the head with the reason,
on the node's own record only.

A packed step (it holds shards: it shares its GPU with other jobs) whose node agent is down or
refuses does not start: the SPANK plugin, as root in the task slurmstepd just forked, writes a
record into the node's root-owned spool (:mod:`slurm_plugin.agent.unisolated`) and ends the task
with :data:`UNISOLATED_EXIT` before the program runs. The node's agent carries the record to the
helper with its samples (the link, MUNGE-signed both ways), also when it was down at the time and
came back since; it deletes the record once this watch acknowledges it.

This watch is the only one that requeues such a job: it judges each record against Slurm's own
view of the job (:func:`judge`: a packed job per Slurm, on that node, in the run the record was
written in), requeues it (``scontrol requeuehold`` + release) and lifts it above every pending job
with a nice (the keep-at-head watch keeps it there and ends the lift when it starts), and says why
in a ``requeue-unisolated`` event, once per record. A record waits on the node while Slurm cannot
be asked about its job (slurmctld busy or down); one whose job Slurm has forgotten (past
``MinJobAge``: the agent was down longer) cannot be requeued: it is dropped and an
``unisolated-lost`` event says so, so the user learns why the job failed. The exit code is never evidence: a job that
exits 117 by itself leaves no record and is an ordinary failed job (slurm.conf has no
``RequeueExit`` for it any more). A job whose whole GPUs could not be isolated runs as Slurm gave
them (fails open) and is not seen here.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from slurm_plugin.helper.watches.head_lift import lift, lift_of
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.slurm.errors import JobNotFoundError, SlurmError
from slurm_plugin.slurm.gres import expand_hostlist
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)

#: the exit code of a packed task the SPANK plugin did not let start (spank/gpupack_spank.c
#: GPUPACK_UNISOLATED_EXIT); a code, never evidence: the record is
UNISOLATED_EXIT = 117
KIND = "requeue-unisolated"
LOST_KIND = "unisolated-lost"  # a record of a job Slurm no longer knows: dropped, and said
#: a record written this long before Slurm's start of the job's run still belongs to it (the
#: node's and the controller's clocks, and the task's start after the job's)
RUN_SLACK_S = 10.0
GONE_STATES = frozenset({"CANCELLED", "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED", "SPECIAL_EXIT"})


@dataclass(frozen=True)
class Verdict:
    """What to do with one record: ``requeue`` (and lift), ``lift`` (already pending: Slurm or an
    administrator requeued it), or ``drop`` (acknowledged, nothing done), and why."""

    act: str
    why: str


def _packed(job: Job) -> bool:
    return any(item.name == "shard" for item in (*job.gres_detail, *job.gres))


def judge(record: Mapping, node: str, job: Job | None) -> Verdict:
    """What one node's record of a packed step not started earns its job (pure).

    The record is root's word that the step did not start; Slurm's own view must agree that the
    job is packed, ran on that node, and that this is the run the record was written in."""
    try:
        job_id, at = int(record["job_id"]), float(record["at"])
    except (KeyError, TypeError, ValueError):
        return Verdict("drop", f"a record that cannot be read: {dict(record)!r}")
    if record.get("node") != node:
        return Verdict("drop", f"a record for node {record.get('node')!r} sent by the agent of {node}")
    if job is None:
        return Verdict("drop", f"Slurm no longer lists job {job_id}")
    if not _packed(job):
        return Verdict("drop", f"job {job_id} holds no shards per Slurm: not a packed job")
    if job.base_state in GONE_STATES:
        return Verdict("drop", f"job {job_id} is {job.base_state}")
    if job.state == "PENDING":
        return Verdict("lift", "already back in the queue")
    hosts = expand_hostlist(job.nodes) if job.nodes else []
    if hosts and node not in hosts:
        return Verdict("drop", f"job {job_id} runs on {job.nodes}, not on {node}")
    if job.start_time is not None and at < job.start_time.timestamp() - RUN_SLACK_S:
        return Verdict("drop", f"the record is of an earlier run of job {job_id} (written {at:.0f}, "
                               f"this run started {job.start_time.timestamp():.0f})")
    return Verdict("requeue", "its packed step did not start")


class UnisolatedWatch:
    name = "unisolated"

    def __init__(self, records: Callable[[], Mapping[str, Sequence[dict]]] = lambda: {},
                 ack: Callable[[object, str, list[str]], None] | None = None) -> None:
        self._records = records  # node -> the records its agent listed (AgentSamples.unisolated)
        self.ack = ack  # (link, node, keys); None: slurm_plugin.agent.client.ack_unisolated
        self.told: set[tuple[int, str, str]] = set()  # (job, node, record key) acted on or dropped

    def job_maps(self) -> list:
        return [self.told]

    def round(self, ctx: RoundContext) -> None:
        for node, records in list(self._records().items()):
            done: list[str] = []
            for record in records:
                key = str(record.get("key", ""))
                try:
                    job_id = int(record.get("job_id", -1))
                except (TypeError, ValueError):
                    job_id = -1
                if (job_id, node, key) in self.told:  # acted on; the acknowledgement did not arrive
                    done.append(key)
                    continue
                if ctx.actions.halted:  # the kill switch: kept on the node until it is off
                    continue
                if self._one(ctx, node, job_id, record):
                    self.told.add((job_id, node, key))
                    done.append(key)
            if done:
                self._ack(ctx, node, done)

    def _one(self, ctx: RoundContext, node: str, job_id: int, record: dict) -> bool:
        """Judge and act on one record; True when it may be acknowledged."""
        job = ctx.jobs.get(job_id)
        forgotten = False
        if job is None and job_id >= 0:  # 23.11+ lists no finished job: a step that never started left it FAILED
            try:
                job = ctx.actions.runner.job(job_id)
            except JobNotFoundError as exc:  # slurmctld forgot it (MinJobAge): it can no longer be requeued
                log.info("job %d: Slurm does not show it (%s)", job_id, exc)
                job, forgotten = None, True
            except SlurmError as exc:  # no answer is no verdict: the record waits on the node for the next round
                log.warning("unisolated-step record from %s (job %d) kept for the next round: Slurm did not say "
                            "what became of the job (%s)", node, job_id, exc)
                return False
        verdict = judge(record, node, job)
        if verdict.act == "drop":
            log.warning("unisolated-step record from %s (job %s): not acted on: %s", node, job_id, verdict.why)
            if forgotten and record.get("node") == node:  # root's word stands; only the requeue is too late
                ctx.actions.log_event(LOST_KIND, f"its packed step {record.get('step_id')} could not be isolated on "
                                      f"{node} and did not start (exit {UNISOLATED_EXIT}, recorded by root on the "
                                      f"node), but Slurm no longer knows the job (its agent came back after "
                                      f"MinJobAge): it stays failed and is not requeued", job_id, node=node,
                                      step=record.get("step_id"))
            return True
        assert job is not None
        why = str(record.get("reason") or "the agent was down or refused")[:300]
        reason = (f"its packed step {record.get('step_id')} could not be isolated on {node} ({why}): it did not start "
                  f"beside other jobs (exit {UNISOLATED_EXIT}, recorded by root on the node); the suite requeues it "
                  f"at the head of the queue")
        data = dict(exit_code=UNISOLATED_EXIT, node=node, step=record.get("step_id"), restarts=job.restart_cnt)
        if verdict.act == "requeue":
            done = ctx.actions.requeue_at_head(job, KIND, reason, **data)
            if not done:  # refused (Slurm, shadow mode): said in an event; not tried again
                log.warning("job %d: unisolated step on %s, not requeued (see the %s events)", job_id, node, KIND)
            return True
        return self._lift(ctx, job, reason, data)

    @staticmethod
    def _lift(ctx: RoundContext, job: Job, reason: str, data: dict) -> bool:
        """A job already pending again (requeued meanwhile): lifted to the head only."""
        priority = None
        if ctx.enforcing:
            try:
                runner = ctx.actions.runner
                lifted = lift_of(runner, ctx.state.heading, job.job_id, job.restart_cnt)
                others = [j.priority for j in ctx.jobs.values() if j.state == "PENDING" and j.job_id != job.job_id]
                lifted, priority = lift(runner, job.job_id, job.priority or 0, lifted, others)
                ctx.state.heading[job.job_id] = lifted  # the keep-at-head watch ends the lift when it starts
            except SlurmError as exc:
                log.error("job %d: not put at the head after its unisolated step: %s", job.job_id, exc)
                priority = None
        ctx.actions.log_event(KIND, reason if priority is not None else f"would lift ({ctx.config.mode} mode "
                              f"or refused): {reason}", job.job_id, priority=priority, **data)
        return True

    def _ack(self, ctx: RoundContext, node: str, keys: list[str]) -> None:
        from slurm_plugin.agent.client import AgentRefused, AgentUnavailable, ack_unisolated

        try:
            (self.ack or ack_unisolated)(ctx.agents, node, keys)
        except (AgentUnavailable, AgentRefused, OSError, ValueError, AttributeError) as exc:
            log.info("could not acknowledge %d unisolated-step records to %s's agent (%s); again next round",
                     len(keys), node, exc)
