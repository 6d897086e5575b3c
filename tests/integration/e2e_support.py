"""What the end-to-end tests on the real cluster share: job scripts, waiting, the event log,
an emptied cluster.

(Imported by name: pytest puts this folder on sys.path, it has no __init__.py.)
"""
from __future__ import annotations

import sys
import time

import pytest

from packer.store import Store

PY = sys.executable
RUN = time.time_ns()  # the cluster's history and pairs outlive a test run: keep runs apart
SLEEP = b"#!/bin/sh\nsleep 300\n"


def simgpu_script(args: str, *, tag: str = "gpupack test run", report: bool = True) -> bytes:
    """A batch script running one simulated GPU workload; `report=False`: it never reports
    its progress (the agent sees only the GPU's counters)."""
    quiet = "" if report else " --no-report"
    # the run's tag is a no-op command, not a comment: a comment does not change the workload
    return f"#!/bin/sh\n: '{tag} {RUN}'\nexec {PY} -m slurm_plugin simgpu run{quiet} {args}\n".encode()


def fill_all_but_one_gpu(cluster, tag: str) -> tuple[dict[str, int], int]:
    """Every GPU busy but node1's first (where the test runs its senior): sleepers on node1's
    second (shard:5, all its shares) and on node2 and node3 (gpu:2), then a job waiting for a whole node,
    held (`scontrol release` it when due). The sleepers of node2 and node3, and the held job."""
    cluster.submit(["-J", f"{tag}-fill", "-w", "node1", "--gres=shard:5"], SLEEP)
    fillers = {n: cluster.submit(["-J", f"{tag}-fill", "-w", n, "--gres=gpu:2"], SLEEP) for n in ("node2", "node3")}
    for job in fillers.values():
        cluster.wait(job, "RUNNING", 30)
    waiting = cluster.submit(["-J", f"{tag}-wait", "--hold", "--gres=gpu:2"], SLEEP)
    return fillers, waiting


def wait_for(predicate, timeout: float, what: str, interval: float = 0.5):
    deadline = time.time() + timeout
    value = None
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what}: not true after {timeout}s (last: {value!r})")


def events(cluster, kind: str, job_id: int):
    store = Store(cluster.spec.database)
    try:
        return [e for e in store.events(limit=500, job_id=job_id) if e.kind == kind]
    finally:
        store.close()


@pytest.fixture
def idle_cluster(cluster):
    """The session's cluster with no job in it, before the test and after it (conftest.py
    imports it, so any test of this folder may ask for it)."""
    cluster.cancel_all()
    try:
        yield cluster
    finally:
        cluster.cancel_all()
