"""A requeued job is lifted above every pending job by an administrator nice, and the lift
ends when it starts (`packer.preemption.head_nice` says why a nice and not a priority).

`scontrol update Nice=N`: under priority/basic the job's priority moves at once; under
priority/multifactor Slurm only computes priorities on its period (PriorityCalcPeriod), so a
lift that did not move the priority is followed by a hold and a release, which has Slurm
compute it now (the job is pending and was just released: nothing else changes).
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import MutableMapping

from packer.preemption import Lift, head_nice
from slurm_plugin.slurm.errors import SlurmError

log = logging.getLogger(__name__)

__all__ = ["Lift", "end_lift", "lift", "lift_of"]


def lift_of(runner, heading: MutableMapping[int, Lift], job_id: int, restart_cnt: int | None) -> Lift:
    """The lift of `job_id` (requeued: its run number now `restart_cnt`) to raise further: the
    one it has (its owner's nice is the one from before the first lift), else a new one from
    the nice it has now. Raises SlurmError."""
    lifted = heading.get(job_id)
    if lifted is None:
        own = runner.nice(job_id)
        return Lift(own, own, restart_cnt)
    return dataclasses.replace(lifted, restart_cnt=restart_cnt)


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
    return dataclasses.replace(lifted, nice=wanted), after or 0


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
