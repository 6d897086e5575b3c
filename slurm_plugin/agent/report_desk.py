"""A node agent's desk for what a job says about itself (`gpupack report`): the report is
checked against the job's token and its previous reports (``trust``), then kept on the job's
assignment; the answer names the workloads of the job's GPU neighbours."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from slurm_plugin.agent.state import Assignment
from slurm_plugin.agent.trust import Peer, ReportGuard, ReportRejected, check_reporter


class ReportingAgent(Protocol):
    """What the desk reads of its node agent (``slurm_plugin.agent.daemon.NodeAgent``)."""

    node: str
    clock: Callable[[], float]
    lock: threading.RLock
    jobs: dict[int, Assignment]


class ReportDesk:
    def __init__(self, agent: ReportingAgent):
        self.agent = agent
        self.guard = ReportGuard()

    def report(self, job_id: int, peer: Peer, body: dict) -> dict:
        """A job's report about itself; answers with its GPU neighbours' workloads."""
        agent = self.agent
        with agent.lock:
            a = agent.jobs.get(job_id)
            if a is None:
                raise ReportRejected(f"job {job_id} is not isolated on {agent.node}")
            check_reporter(job_id, str(body.get("token", "")), a.token, peer)
            now = agent.clock()
            try:
                ok = self.guard.check(body, a.iterations, a.last_report_at, a.started_at, now)
            except ReportRejected:
                a.rejected_reports += 1
                raise
            a.iterations, a.last_report_at = ok.iterations, now
            a.throughput = ok.throughput if ok.throughput is not None else a.throughput
            a.util_pct = ok.util_pct if ok.util_pct is not None else a.util_pct
            a.workload = ok.workload or a.workload
            if ok.checkpoint:
                a.last_checkpoint_at = now
                a.checkpoints += 1
            if ok.checkpoint_every_s is not None:
                a.checkpoint_every_s = ok.checkpoint_every_s
            if ok.alloc_peak_bytes is not None:
                a.alloc_peak_bytes = max(a.alloc_peak_bytes or 0, ok.alloc_peak_bytes)
            a.reports += 1
            return {"status": "ok", "neighbours": self.neighbours(a)}

    def neighbours(self, a: Assignment) -> list[str]:
        """The workloads of the other jobs on ``a``'s GPU ("unknown": not reported)."""
        return [b.workload or "unknown" for b in self.agent.jobs.values()
                if b.job_id != a.job_id and b.gpu_index == a.gpu_index and b.gpu_index >= 0]
