"""A packed job is never run unisolated, on the multi-host cluster.

node2's agent is stopped; a packed job (shard:1) sent there does not run its program: the
SPANK plugin ends its task (exit 117) before it starts, Slurm requeues it (RequeueExit, no
node drained), and the helper explains the requeue in an event and puts the job at the head.
Once the agent is back, the same job runs, isolated on a MIG slice. A whole-GPU job on the
same node while its agent is down still runs (unpacked jobs fail open)."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest
from e2e_support import wait_for

from store.db import Store
from slurm_plugin.helper.watches.unisolated import KIND, UNISOLATED_EXIT

pytestmark = pytest.mark.integration
DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}


def agent_pid(cluster, node: str) -> int:
    procs = json.loads((cluster.state_dir / "run" / "processes.json").read_text())
    return next(p["pid"] for p in procs if p["role"] == "agent" and p["name"] == node)


def running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def requeue_events(cluster, job_id: int):
    store = Store(cluster.spec.database)
    try:
        return [e for e in store.events(limit=500, job_id=job_id) if e.kind == KIND]
    finally:
        store.close()


def test_a_packed_job_whose_agent_is_down_is_requeued_not_run_unisolated(idle_cluster):
    cluster, node, wd = idle_cluster, "node2", idle_cluster.workdir
    pid = agent_pid(cluster, node)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not running(pid), 20, "the agent gone")
    try:
        ran = wd / f"unisolated-ran-{time.time_ns()}"
        body = f"#!/bin/sh\necho \"$SLURM_RESTART_COUNT $GPUPACK_ISOLATION $CUDA_VISIBLE_DEVICES\" >> {ran}\nsleep 2\n"
        job = cluster.submit(["--gres=shard:1", "-w", node, "-J", "unisolated"], body.encode())
        assert cluster.wait(job, DONE, 60) == "FAILED"
        info = cluster.job(job)
        assert info["ExitCode"] == f"{UNISOLATED_EXIT}:0" and int(info["Restarts"]) == 0, info
        assert not requeue_events(cluster, job)  # root's record is on the node; nobody has read it yet
        assert not ran.exists(), ran.read_text()  # its program never ran without isolation
        assert "DRAIN" not in cluster.run("sinfo", "-h", "-n", node, "-o", "%T").stdout.decode().upper()

        whole = wd / f"unisolated-whole-{time.time_ns()}"
        plain = cluster.submit(["--gres=gpu:1", "-w", node, "-J", "unisolated-whole"],
                               f"#!/bin/sh\necho ran > {whole}\n".encode())
        assert cluster.wait(plain, DONE, 60) == "COMPLETED" and whole.exists()  # fails open
    finally:
        cluster.dev.up()  # starts what is not running: the agent of node2
    event = wait_for(lambda: requeue_events(cluster, job), 60, "a requeue-unisolated event")[0]
    assert "could not be isolated" in event.detail and "at the head of the queue" in event.detail
    assert event.data["exit_code"] == UNISOLATED_EXIT and event.data["node"] == node, event.data
    assert cluster.wait(job, DONE, 120) == "COMPLETED"
    assert int(cluster.job(job)["Restarts"]) >= 1
    (line,) = ran.read_text().splitlines()
    restarts, isolation, devices = line.split(" ")
    assert int(restarts) >= 1 and isolation.startswith("mig:1g.10gb") and devices.startswith("MIG-"), line
    spool = cluster.node_view(node) / "agent" / node / "unisolated"
    assert not list(spool.glob("*.json")), sorted(p.name for p in spool.iterdir())  # acknowledged, removed
