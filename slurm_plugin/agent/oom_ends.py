"""Packed jobs whose step ended out of memory in their share, until the helper has answered.

The evidence comes from the node: the step's exit status (the SPANK plugin's task-exit
hook, in slurmstepd, before slurmd tells slurmctld the job ended), what the job held on the
GPU (the GPU's own accounting, sampled by the agent), and the job's word: the failed
allocation it reported itself (`alloc_failed`, as a framework's out-of-memory observer would),
or, for a job that reports nothing, a framework's out-of-memory text in the tail of its output
(`packer.oom_texts`, read by `oom_desk` with the user's rights). The size it asked for is
bounded, the memory it held is never taken from it. Whether that is an out-of-memory end is
`packer.oom_restart.oom_end`; `evidence` says what it rests on (measured: the node saw its
memory at the share's limit, the helper requeues it at the head; reported: only the job's word,
a retry at its own place in the queue).

An OOM end **holds** the step's end: the plugin asks again every half second until the helper
settles it (it requeued the job, or decided not to) or the hold passes, so the helper can
requeue the job while Slurm still has it RUNNING and `afternotok` dependents never see a
failure. The hold (`hold_limit`) is `HOLD_S`, or `HOLD_ROUNDS` of the helper's cycles where its
lists come slower (a slow slurmctld stretches the helper's rounds: seen, 20 s cycles on a
loaded controller, where a fixed 20 s let an OOM end fail a round before the helper's answer),
never more than `HOLD_MAX_S`. An end the helper did not settle in time stays listed for
`KEEP_S`: the helper then requeues the FAILED job while slurmctld still holds it.
"""
from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from typing import Callable

from packer.oom_restart import OomEvidence, oom_basis, oom_end
from packer.oom_texts import OomText
from slurm_plugin.agent.state import Assignment

log = logging.getLogger(__name__)

HOLD_S = 20.0  # the least a step's end may wait for the helper
HOLD_ROUNDS = 2.5  # ... or this many of the helper's cycles, as the agent measured them
HOLD_MAX_S = 80.0  # and never longer (the SPANK plugin's own ceiling, HOLD_MAX_MS, is 90 s)
KEEP_S = 600.0  # an unsettled end stays listed this long (the helper may still requeue it)
HOLD, DONE = "hold", "done"


@dataclass
class OomEnd:
    """One out-of-memory end of a packed job's step, as the helper reads it."""

    job_id: int
    node: str
    gpu_index: int
    isolation: str
    shards: int
    step_id: int
    exit_code: int
    limit_bytes: int
    peak_bytes: int
    asked_bytes: int | None
    held_bytes: int | None
    at: float
    reason: str
    started_at: float | None = None
    settled: str | None = None  # the helper's answer ("requeued", "left", ...)
    evidence: str = "measured"  # measured | reported (`packer.oom_restart.oom_basis`)
    seen_in: str | None = None  # where the job's word came from: "report", "output:<framework>:<text>"
    said_line: str | None = None  # the output's line (cut), for the operator
    said_oom: bool = False  # its output named an out-of-memory failure

    def to_dict(self) -> dict:
        return asdict(self)


def hold_limit(least_s: float, pace_s: float | None) -> float:
    """How long a step's end waits for the helper: ``least_s``, or :data:`HOLD_ROUNDS` of the
    helper's measured cycle ``pace_s`` where that is longer, at most :data:`HOLD_MAX_S`."""
    if pace_s is None or not math.isfinite(pace_s) or pace_s <= 0:
        return least_s
    return min(HOLD_MAX_S, max(least_s, HOLD_ROUNDS * pace_s))


class OomEnds:
    """The node's OOM ends (in memory: an agent restart loses them, and the job is then
    recorded FAILED like any other; its run is a lower bound all the same)."""

    def __init__(self, node: str, clock: Callable[[], float], hold_s: float = HOLD_S,
                 pace: Callable[[], float | None] | None = None):
        self.node = node
        self.clock = clock
        self.least_hold_s = hold_s
        self.pace = pace  # the helper's measured cycle (`slurm_jobs.PushedJobs.pace_s`), where lists come
        self.ends: dict[int, OomEnd] = {}
        self.failed_allocs: dict[int, tuple[int, int]] = {}  # job -> (asked, held) it reported

    @property
    def hold_s(self) -> float:
        """How long an end waits for the helper now (:func:`hold_limit`)."""
        return hold_limit(self.least_hold_s, self.pace() if self.pace is not None else None)

    def alloc_failed(self, job_id: int, asked: int, held: int) -> None:
        self.failed_allocs[job_id] = (asked, held)

    @staticmethod
    def may_be_oom(a: Assignment, exit_code: int, limit_bytes: int | None) -> bool:
        """Whether an end like this one could be an OOM end in a share at all."""
        return exit_code != 0 and a.kind in ("mig", "mps") and bool(limit_bytes)

    def end_without_words(self, a: Assignment, exit_code: int, limit_bytes: int) -> bool:
        """Whether this end is an OOM end without the job's output: it reported the failed
        allocation itself, or the node measured its memory at the share's limit."""
        if a.job_id in self.failed_allocs:
            return True
        peak = max(a.peak_mem_bytes, a.last_mem_bytes)
        return oom_end(OomEvidence(exit_code, limit_bytes, peak, None, None)) is not None

    def has_end(self, a: Assignment) -> bool:
        end = self.ends.get(a.job_id)
        return end is not None and end.started_at == a.started_at

    def task_exit(self, a: Assignment, step_id: int, exit_code: int, limit_bytes: int | None,
                  said: OomText | None = None, ended_at: float | None = None) -> str:
        """HOLD while the helper has not answered an OOM end of this packed job, else DONE.
        ``said``: a framework's out-of-memory text found in the job's output (its word);
        ``ended_at``: when the step ended, where that was before this call (its hold counts from
        then)."""
        now = self.clock()
        self._forget_old(now)
        end = self.ends.get(a.job_id)
        if end is not None and end.started_at != a.started_at:  # an earlier run of a requeued job
            end = self.ends.pop(a.job_id)  and None
        if end is None:
            if not self.may_be_oom(a, exit_code, limit_bytes):
                return DONE
            assert limit_bytes is not None
            asked, held = self.failed_allocs.pop(a.job_id, (None, None))
            seen_in = "report" if asked is not None else None
            peak = max(a.peak_mem_bytes, a.last_mem_bytes)
            if asked is None and said is not None:  # its output's word: held is what the node measured
                asked, held = said.requested_bytes, (peak if said.requested_bytes is not None else None)
                seen_in = f"output:{said.framework}:{said.text_id}"
            ev = OomEvidence(exit_code, limit_bytes, peak, asked, held, said_oom=said is not None)
            why = oom_end(ev)
            if why is None:
                return DONE
            end = self.ends[a.job_id] = OomEnd(a.job_id, self.node, a.gpu_index, a.isolation, a.shards, step_id,
                                               exit_code, int(limit_bytes), int(peak), asked, held,
                                               now if ended_at is None else min(now, ended_at), why,
                                               a.started_at, evidence=oom_basis(ev) or "measured", seen_in=seen_in,
                                               said_line=said.line[:300] if said is not None else None,
                                               said_oom=said is not None)
            log.warning("job %d step %d ended out of memory in its share (%s; %s): its end waits up to %.0fs for "
                        "the helper", a.job_id, step_id, why, end.evidence, self.hold_s)
        if end.settled is not None or now - end.at >= self.hold_s:
            return DONE
        return HOLD

    def settle(self, job_id: int, outcome: str) -> bool:
        end = self.ends.get(job_id)
        if end is None:
            return False
        end.settled = outcome
        log.info("job %d: the helper answered its out-of-memory end: %s", job_id, outcome)
        return True

    def waiting(self) -> list[dict]:
        """The ends the helper has not answered (the held ones and those past their hold)."""
        self._forget_old(self.clock())
        return [e.to_dict() for e in self.ends.values() if e.settled is None]

    def _forget_old(self, now: float) -> None:
        for job_id in [j for j, e in self.ends.items() if now - e.at > KEEP_S]:
            del self.ends[job_id]
