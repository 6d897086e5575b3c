"""Who may ask the node agent what, and how far a job's reports about itself are believed.

- Isolation, step ends, samples and final summaries: only root and the SlurmUser (the
  peer's kernel credentials, SO_PEERCRED).
- ``report``: any uid, but only about its own job: the request carries the job's report
  token (issued by the agent into that job's step environment), and the peer process must
  belong to that job (its ``SLURM_JOB_ID`` in ``/proc/<pid>/environ``, read as root).
- ``alloc_failed``: the same checks; a job says an allocation failed and how large it was
  (bounded by the GPU's memory); what it held is read from the GPU, never from it.
- A report's numbers are bounded and checked (:class:`ReportGuard`); memory is never
  taken from a report, only from the GPU's own accounting.
- A report may say the job just checkpointed (``checkpoint: true``) and how often it does
  (``checkpoint_every_s``); the checkpoint's time is the agent's clock when the report
  arrives, never a time the job claims.
"""
from __future__ import annotations

import hmac
import re
import socket
from dataclasses import dataclass

from slurm_plugin.agent.pid_jobs import job_of_environ
from slurm_plugin.unix_socket import peer_credentials

PRIVILEGED_OPS = frozenset({"isolate", "step_end", "samples", "finish", "status", "layout", "jobs", "finals",
                            "ack_finals", "mps_plan", "task_exit", "oom_settle",
                            "ack_unisolated", "adoption"})
OPEN_OPS = frozenset({"ping", "report", "alloc_failed"})
MAX_ITER_RATE = 10_000.0  # iterations per second a report may claim
MAX_THROUGHPUT = 10_000.0
MIN_REPORT_INTERVAL_S = 0.1  # reports closer together than this are dropped
MIN_CHECKPOINT_EVERY_S = 0.1
MAX_CHECKPOINT_EVERY_S = 7 * 86400.0  # a week: a longer period is no checkpointing at all
MAX_ALLOC_BYTES = float(1 << 50)  # 1 PiB: an allocator's peak past this is not a GPU's
WORKLOAD_RE = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")


@dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    gid: int


class ReportRejected(ValueError):
    """A job's report is not believed; the message says why."""


def peer_of(sock: socket.socket) -> Peer:
    return Peer(*peer_credentials(sock))


def may_call(op: str, peer: Peer, allowed_uids: set[int]) -> bool:
    if op in OPEN_OPS:
        return True
    return op in PRIVILEGED_OPS and peer.uid in allowed_uids


def job_of_pid(pid: int, proc: str = "/proc") -> int | None:
    """The SLURM_JOB_ID in a process's environment (None when absent or unreadable)."""
    try:
        with open(f"{proc}/{pid}/environ", "rb") as fh:
            return job_of_environ(fh.read(1 << 20))
    except OSError:
        return None


def check_reporter(job_id: int, token: str, expected_token: str, peer: Peer,
                   proc: str = "/proc") -> None:
    """Raise ReportRejected unless the peer may report for ``job_id``."""
    if not expected_token or not hmac.compare_digest(str(token), expected_token):
        raise ReportRejected(f"wrong report token for job {job_id}")
    owner_job = job_of_pid(peer.pid, proc)
    if owner_job != job_id:
        raise ReportRejected(
            f"pid {peer.pid} (uid {peer.uid}) belongs to job {owner_job}, not to job {job_id}")


@dataclass(frozen=True)
class Accepted:
    iterations: int
    throughput: float | None
    util_pct: float | None
    workload: str | None
    checkpoint: bool = False  # the job says it has just checkpointed
    checkpoint_every_s: float | None = None  # how often it says it checkpoints
    # its framework allocator's peak of allocated bytes (`TorchProbe.report`): what it needed,
    # which the helper never takes above what NVML saw of it (`packer.need`)
    alloc_peak_bytes: int | None = None


class ReportGuard:
    """Bounds on what a job may say about its own progress."""

    def check(self, report: dict, last_iterations: int | None, last_at: float | None,
              started_at: float | None, now: float) -> Accepted:
        it = report.get("iterations")
        if not isinstance(it, int) or isinstance(it, bool) or it < 0:
            raise ReportRejected(f"iterations must be a non-negative integer, got {it!r}")
        if last_at is not None and now - last_at < MIN_REPORT_INTERVAL_S:
            raise ReportRejected("rate-limited: reports come faster than every "
                                 f"{MIN_REPORT_INTERVAL_S}s")
        if last_iterations is not None and it < last_iterations:
            raise ReportRejected(f"iterations went backwards ({last_iterations} -> {it})")
        since = last_at if last_at is not None else started_at
        if since is not None:
            allowed = (last_iterations or 0) + MAX_ITER_RATE * max(now - since, 0.0) + 10
            if it > allowed:
                raise ReportRejected(f"{it} iterations is more than {MAX_ITER_RATE:.0f}/s allows")
        tput = _bounded(report.get("throughput"), 0.0, MAX_THROUGHPUT, "throughput")
        util = _bounded(report.get("util_pct"), 0.0, 100.0, "util_pct")
        workload = report.get("workload")
        if workload is not None and (not isinstance(workload, str) or not WORKLOAD_RE.match(workload)):
            raise ReportRejected("workload must be 1-64 characters of letters, digits, _.+-")
        checkpoint = report.get("checkpoint", False)
        if not isinstance(checkpoint, bool):
            raise ReportRejected(f"checkpoint must be true or false, got {checkpoint!r}")
        every = _bounded(report.get("checkpoint_every_s"), MIN_CHECKPOINT_EVERY_S, MAX_CHECKPOINT_EVERY_S,
                         "checkpoint_every_s")
        alloc = report.get("alloc_peak_bytes")
        if alloc is not None and (isinstance(alloc, bool) or not isinstance(alloc, int)):
            raise ReportRejected(f"alloc_peak_bytes must be an integer, got {alloc!r}")
        alloc_peak = _bounded(alloc, 0.0, MAX_ALLOC_BYTES, "alloc_peak_bytes")
        return Accepted(it, tput, util, workload, checkpoint, every,
                        None if alloc_peak is None else int(alloc_peak))


def _bounded(value, lo: float, hi: float, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ReportRejected(f"{name} must be a number, got {value!r}")
    if not lo <= float(value) <= hi:
        raise ReportRejected(f"{name} {value} is outside [{lo}, {hi}]")
    return float(value)
