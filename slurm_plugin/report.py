"""A job's own progress report to the node agent: optional, and preferred when present.

The helper sees a job that reports nothing through the GPU's utilisation counters. A job
that knows its throughput (samples, tokens or iterations a second) can say so, and the
helper then judges contention on that instead::

    from slurm_plugin.report import report
    report(throughput=samples_per_s, iterations=step)

or from a shell, inside the job: ``gpupack report --throughput 812.5 --iterations 1200``.
A job that checkpoints says so when it has (``report(iterations=step, checkpoint=True,
checkpoint_every_s=600)``, ``gpupack report --checkpoint --checkpoint-every 600``): a
regroup move then waits for its checkpoint instead of the signal's whole grace time, and a
``--requeue`` job that reports its checkpoints may be moved without a ``--signal``.
It needs the environment the SPANK plugin gives each job step (``GPUPACK_AGENT_SOCKET``,
``GPUPACK_REPORT_TOKEN``, ``SLURM_JOB_ID``); the agent checks the token and that the
calling process belongs to the job, and bounds what it may claim
(:class:`slurm_plugin.agent.trust.ReportGuard`: iterations never go backwards, at most
one report every 0.1 s).
"""
from __future__ import annotations

import os
from collections.abc import Mapping


class ReportError(RuntimeError):
    """The report could not be given; the message says why and what to do."""


def report(throughput: float | None = None, *, iterations: int = 0, util_pct: float | None = None,
           workload: str | None = None, checkpoint: bool = False, checkpoint_every_s: float | None = None,
           env: Mapping[str, str] | None = None, timeout: float = 1.0) -> dict:
    """Send one progress report for the current job; returns the agent's answer."""
    from slurm_plugin.agent.client import ask

    env = os.environ if env is None else env
    socket, token, job = env.get("GPUPACK_AGENT_SOCKET"), env.get("GPUPACK_REPORT_TOKEN"), env.get("SLURM_JOB_ID", "")
    if not socket or not token or not job.isdigit():
        raise ReportError("not inside a gpupack job step (GPUPACK_AGENT_SOCKET, GPUPACK_REPORT_TOKEN or "
                          "SLURM_JOB_ID unset): run it in a Slurm job on a node with the gpupack agent")
    body: dict = {"op": "report", "job_id": int(job), "token": token, "iterations": int(iterations)}
    if throughput is not None:
        body["throughput"] = float(throughput)
    if util_pct is not None:
        body["util_pct"] = float(util_pct)
    if workload:
        body["workload"] = workload
    if checkpoint:
        body["checkpoint"] = True
    if checkpoint_every_s is not None:
        body["checkpoint_every_s"] = float(checkpoint_every_s)
    try:
        answer = ask(socket, body, timeout)
    except OSError as exc:
        raise ReportError(f"the node agent at {socket} did not answer: {exc}") from exc
    if answer.get("status") != "ok":
        raise ReportError(f"the node agent refused the report: {answer.get('reason')}")
    return answer
