"""A packed job that ran out of memory in its share: was it, and where does it go next (pure).

The share fences the job (its MIG slice, or its MPS memory limit): an allocation past it
fails in the job alone, its neighbours keep their memory. What ends the job is then its own
`CUDA out of memory`. The suite recognises that end from **evidence**, never from a full
partition alone (a framework that preallocates sits at its limit all the time):

- the step exited nonzero, **and**
- an allocation failed at the share's limit: the job's own report of the failed allocation
  (what it held plus what it asked for goes past the limit), or, for a job that reports
  nothing, its measured memory at the limit when it ended (`FULL_FRACTION`).

Where the job may be requeued it goes back to the head of the queue on the next size that
holds what it needed (what it held plus the failed allocation, its measured peak, and the
forecast of its measured curve when there is one), or a whole GPU; the failed run's peak is
a lower bound (`packer.run_truth`), never the workload's size. Retries are capped per job and
per workload; past a cap, or at the largest size, the job is left FAILED with the reason.

The helper's OOM watch and the simulator call the same functions.
"""
from __future__ import annotations

from dataclasses import dataclass

from packer.preemption import restart_size

KIND = "restart-oom"
#: a job that reports nothing ended with its measured memory at least this share of its limit
FULL_FRACTION = 0.95
GIB = 1024**3


@dataclass(frozen=True)
class OomEvidence:
    """How a packed job's step ended, as its node saw it."""

    exit_code: int  # the step's exit status (0: it ended well)
    limit_bytes: float  # what its share lets it hold (MIG slice, MPS limit)
    peak_bytes: float  # its measured peak (the agent's samples)
    asked_bytes: float | None = None  # the allocation that failed (the job's report; None: none)
    held_bytes: float | None = None  # what it held when that allocation failed

    def __post_init__(self) -> None:
        if self.limit_bytes <= 0:
            raise ValueError(f"limit_bytes must be positive, got {self.limit_bytes}")
        if self.peak_bytes < 0 or (self.asked_bytes is not None and self.asked_bytes < 0):
            raise ValueError("peak_bytes and asked_bytes must not be negative")

    @property
    def wanted_bytes(self) -> float:
        """What the job needed at least: held plus the failed allocation, else its peak."""
        if self.asked_bytes is None:
            return self.peak_bytes
        held = self.held_bytes if self.held_bytes is not None else self.peak_bytes
        return max(self.peak_bytes, held + self.asked_bytes)


def oom_end(e: OomEvidence) -> str | None:
    """Why this end is an out-of-memory end in the share, or None when it is not one."""
    if e.exit_code == 0:
        return None
    gib = e.limit_bytes / GIB
    if e.asked_bytes is not None:
        if e.wanted_bytes > e.limit_bytes:
            return (f"exit {e.exit_code} after an allocation of {e.asked_bytes / GIB:.2f}GiB failed with "
                    f"{(e.held_bytes or 0) / GIB:.2f}GiB held, past its {gib:.2f}GiB share")
        return None  # it failed an allocation that fitted: not its share's limit
    if e.peak_bytes >= FULL_FRACTION * e.limit_bytes:
        return f"exit {e.exit_code} with its memory at its {gib:.2f}GiB share ({e.peak_bytes / GIB:.2f}GiB)"
    return None


def measured_by_node(e: OomEvidence) -> bool:
    """The node's own measurement shows the share was full when the step ended (its peak, from
    the GPU's accounting, at the limit): the suite's fence stopped the job, which earns it the
    head of the queue. Otherwise the end rests on the job's own report (``alloc_failed``), which
    earns a retry at its own place in the queue, never a lift above jobs that waited longer."""
    return e.exit_code != 0 and e.peak_bytes >= FULL_FRACTION * e.limit_bytes


@dataclass(frozen=True)
class OomRetryLimits:
    per_job: int = 2  # restart-oom requeues of one job
    per_workload: int = 4  # of one workload (fingerprint), over the store's recent events

    def __post_init__(self) -> None:
        if self.per_job < 0 or self.per_workload < 0:
            raise ValueError("retry limits must be 0 or more")


@dataclass(frozen=True)
class OomDecision:
    """Requeue at the head on `shards` (None: a whole GPU), or leave it FAILED (`requeue`
    False); `reason` says which and why."""

    requeue: bool
    reason: str
    shards: int | None = None
    need_bytes: float = 0.0  # what the next run must hold
    lower_bound_bytes: float = 0.0  # the failed run's peak: a bound, never the workload's size

    @property
    def whole_gpu(self) -> bool:
        return self.requeue and self.shards is None


def decide_oom_restart(e: OomEvidence, *, shards: int, share_bytes: float, max_shards: int,
                       job_retries: int = 0, workload_retries: int = 0,
                       limits: OomRetryLimits = OomRetryLimits(), requeueable: bool = True,
                       forecast_bytes: float | None = None, remembered_shards: int | None = None,
                       whole_gpu_allowed: bool = True) -> OomDecision:
    """What to do with a packed job on `shards` whose step ended as `e` says.

    `forecast_bytes`: the peak its measured curve forecasts (None: no forecast);
    `remembered_shards`: the workload's remembered size; `whole_gpu_allowed`: False where
    Slurm cannot turn a shard job into a GPU job (22.05)."""
    why = oom_end(e)
    bound = e.peak_bytes
    if why is None:
        return OomDecision(False, "not an out-of-memory end in its share", lower_bound_bytes=bound)
    need = max(e.wanted_bytes, e.peak_bytes, forecast_bytes or 0.0, e.limit_bytes + 1)

    def left(reason: str) -> OomDecision:
        return OomDecision(False, f"{why}; left FAILED: {reason}", None, need, bound)

    if not requeueable:
        return left("it may not be requeued (--no-requeue)")
    if job_retries >= limits.per_job:
        return left(f"already requeued {job_retries} time{'s' if job_retries != 1 else ''} for memory "
                    f"(limit {limits.per_job} per job)")
    if workload_retries >= limits.per_workload:
        return left(f"its workload was requeued {workload_retries} times for memory recently "
                    f"(limit {limits.per_workload})")
    size = restart_size(shards, need, share_bytes, max_shards)
    to = size.shards
    if to is not None and remembered_shards:
        to = max(to, remembered_shards) if remembered_shards <= max_shards else None
    if to is None and not whole_gpu_allowed:
        return left(f"it needs a whole GPU ({need / GIB:.1f}GiB) and this Slurm cannot turn a shard job "
                    "into a GPU job; its next run is exclusive (size remembered)")
    target = "a whole GPU" if to is None else f"shard:{to}"
    return OomDecision(True, f"{why}; requeued at the head on {target} (needs {need / GIB:.1f}GiB, "
                             f"retry {job_retries + 1} of {limits.per_job})", to, need, bound)


def judge_oom_retry(mode: str, end_state: str | None) -> tuple[str, str] | None:
    """Was a restart-oom decision right, from how the job ended (None: it has not ended)?
    (outcome, detail) with the outcomes of `packer.action_outcomes`.

    Enforced: right when the requeued run completed on its larger size, wrong when it failed
    again. Shadow (the job left alone): right when it ended failed (the requeue would have
    saved the run), wrong when it completed all the same (the step's end did not end it)."""
    if end_state is None:
        return None
    failed = end_state in ("FAILED", "OUT_OF_MEMORY")
    if mode == "shadow":
        if failed:
            return "right", f"left alone, the job ended {end_state}: the requeue would have saved the run"
        if end_state == "COMPLETED":
            return "wrong", "left alone, the job completed all the same: no requeue was needed"
    else:
        if end_state == "COMPLETED":
            return "right", "the requeued run completed on its larger size"
        if failed:
            return "wrong", f"the requeued run ended {end_state} again"
    return "unknown", f"the job ended {end_state}"
