"""A requeued job is lifted above every pending job by an administrator nice, and the lift
ends when it starts (`packer.preemption.head_nice` says why a nice and not a priority).

`scontrol update Nice=N`: under priority/basic the job's priority moves at once; under
priority/multifactor Slurm only computes priorities on its period (PriorityCalcPeriod), so a
lift that did not move the priority is followed by a hold and a release, which has Slurm
compute it now (the job is pending and was just released: nothing else changes).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from packer.preemption import head_nice
from slurm_plugin.slurm.errors import SlurmError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lift:
    """A job being kept at the head: its owner's nice (put back when it starts) and the nice
    it has now."""

    own_nice: int
    nice: int


def lift(runner, job_id: int, priority: int, lifted: Lift, pending: list[int | None]) -> tuple[Lift, int]:
    """Lift the pending job `job_id` (at `priority` now) above every priority in `pending`
    (the other pending jobs'); its lift and priority after. Raises SlurmError."""
    wanted = head_nice(priority, lifted.nice, pending)
    if wanted is None:
        return lifted, priority
    runner.update_job(job_id, Nice=wanted)
    after = runner.job(job_id).priority
    if after == priority:  # computed on the period (multifactor): a release computes it now
        runner.hold(job_id)
        try:
            runner.release(job_id)
        except SlurmError:
            runner.release(job_id)  # once more: a lift never leaves a job held
        after = runner.job(job_id).priority
    return Lift(lifted.own_nice, wanted), after or 0


def end_lift(actions, job_id: int, lifted: Lift) -> None:
    """The job started: its owner's nice back, so the priority Slurm computes is its own
    again (a later requeue, by the suite or by Slurm, starts it from there)."""
    if lifted.nice == lifted.own_nice:
        return
    try:
        actions.update_job(job_id, Nice=lifted.own_nice)
        log.info("job %d started: its head-of-queue nice %d ended (back to %d)", job_id, lifted.nice,
                 lifted.own_nice)
    except SlurmError as exc:  # it ended meanwhile: nothing left to change
        log.info("job %d: could not put its nice back to %d: %s", job_id, lifted.own_nice, exc)
