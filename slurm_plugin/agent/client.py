"""Talking to a node agent: for the workload, the epilog, the helper and tools."""
from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from packer.samples import JobSample
from slurm_plugin.agent.paths import final_path, socket_path


class AgentUnavailable(OSError):
    """The agent's socket does not answer."""


def ask(path: Path | str, request: dict, timeout: float = 2.0) -> dict:
    """Send one request (a JSON object), return the agent's JSON answer."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall((json.dumps(request) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        raise AgentUnavailable(f"node agent at {path}: {exc}") from exc
    try:
        return json.loads(data or b"{}")
    except ValueError as exc:
        raise AgentUnavailable(f"node agent at {path} answered garbage: {data[:200]!r}") from exc


def samples(state_dir: Path | str, node: str, job_id: int | None = None, *, latest: bool = False,
            since: float | None = None, timeout: float = 2.0) -> list[JobSample]:
    """The agent's samples (root or SlurmUser only); ``latest`` gives the newest per job."""
    req: dict = {"op": "samples", "latest": latest}
    if job_id is not None:
        req["job_id"] = int(job_id)
    if since is not None:
        req["since"] = since
    answer = ask(socket_path(Path(state_dir), node), req, timeout)
    if answer.get("status") != "ok":
        raise PermissionError(f"agent of {node} refused samples: {answer.get('reason')}")
    return [JobSample.from_dict(s) for s in answer.get("samples", [])]


def final_stats(state_dir: Path | str, node: str, job_id: int, wait_s: float = 3.0) -> dict | None:
    """The job's final summary on ``node`` (None when the agent never isolated it).

    Keys: job_id, node, gpu_index, isolation, shards, workload, peak_mem_bytes,
    mean_util_pct, mean_throughput, iterations, samples, started_at, ended_at, end_reason.
    The agent writes it when the job's batch step ends (before the Epilog runs). If it is
    not there yet, this asks the agent to finish the job now, and waits up to ``wait_s``.
    """
    path = final_path(Path(state_dir), node, job_id)
    deadline = time.monotonic() + wait_s
    asked = False
    while True:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            pass
        if not asked:
            asked = True
            try:
                answer = ask(socket_path(Path(state_dir), node), {"op": "finish", "job_id": int(job_id)}, timeout=wait_s)
                if answer.get("status") == "ok" and answer.get("summary") is None:
                    return None  # the agent does not know this job
            except AgentUnavailable:
                pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)
