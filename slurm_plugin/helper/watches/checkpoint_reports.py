"""The checkpoints running jobs report about themselves, as the node agents' samples carry them.

A job may tell its node agent when it has checkpointed and how often it does
(`gpupack report --checkpoint --checkpoint-every S`, `simgpu run --checkpoint-every N`); the
agent times each checkpoint by its own clock and every sample of the job carries the last
one (`JobSample.last_checkpoint_at`) and the period (`checkpoint_every_s`). This keeps the
newest of each job's samples per node, so a round without a sample of the job still knows,
and answers for the job's present run only: a checkpoint, or a sample, older than the run's
start (a requeued job's earlier run) does not count.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from packer.samples import JobSample

CLOCK_SLACK_S = 1.0  # the agents' clocks against Slurm's start time (one host, or NTP)


@dataclass(frozen=True)
class CheckpointReport:
    """What a job's present run said about its checkpoints."""

    last_at: float | None  # when it last checkpointed (the agent's time of the report)
    every_s: float | None  # the period it gave


class CheckpointReports:
    """Each job's newest sample per node (only what it says about its checkpoints)."""

    def __init__(self) -> None:
        self._newest: dict[int, dict[str, JobSample]] = {}  # job -> node -> its newest sample

    def update(self, samples: Iterable[JobSample]) -> None:
        for s in samples:
            per_node = self._newest.setdefault(s.job_id, {})
            old = per_node.get(s.node)
            if old is None or s.at >= old.at:
                per_node[s.node] = s

    def keep_only(self, job_ids: set[int]) -> None:
        """Forget the jobs that are no longer running."""
        for job_id in [j for j in self._newest if j not in job_ids]:
            del self._newest[job_id]

    def of(self, job_id: int, run_start: float | None = None) -> CheckpointReport | None:
        """What the run of `job_id` that started at `run_start` reported; None when nothing."""
        since = (run_start - CLOCK_SLACK_S) if run_start is not None else float("-inf")
        mine = [s for s in self._newest.get(job_id, {}).values() if s.at >= since]
        lasts = [s.last_checkpoint_at for s in mine if s.last_checkpoint_at is not None
                 and s.last_checkpoint_at >= since]
        periods = [s.checkpoint_every_s for s in mine if s.checkpoint_every_s is not None]
        if not lasts and not periods:
            return None
        return CheckpointReport(max(lasts) if lasts else None, max(periods) if periods else None)
