"""Issue 26 on the real cluster: a packed job given a whole GPU back at dispatch (item 2), and
the cap on a GPU's total memory held by the steering (item 4).

Uses the session fixture `cluster` (3 nodes x 2 simulated H100s, 5 shares a GPU, helper in
enforce mode, `pack_only_when_no_idle_gpu` on: the default).
"""
from __future__ import annotations

import json
import time

import pytest

from e2e_support import SLEEP, events, wait_for, within_rounds
from packer.comment import parse
from packer.fingerprint import fingerprint
from store.db import RunRecord, Store

pytestmark = pytest.mark.integration
GIB = 1024**3


def _seed(cluster, name: str, body: bytes) -> str:
    fp = fingerprint("root", name, body)
    store = Store(cluster.spec.database)
    try:
        store.record_run(RunRecord(job_id=990001, fingerprint=fp, peak_mem_bytes=int(7.6 * GIB), mean_util_pct=30.0))
    finally:
        store.close()
    return fp


def _view_all_busy(cluster, jobs) -> None:
    """Wait until the watcher's cluster view shows ``jobs`` running and no GPU idle (the
    submit side decides from it)."""
    path = cluster.spec.helper_socket.parent / "cluster-view.json"

    def busy() -> bool:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            return False
        return set(jobs) <= {r["job_id"] for r in doc["running"]} and all(
            len(n["busy"]) >= n["gpus"] for n in doc["nodes"])
    wait_for(busy, 45, "the cluster view shows every GPU busy")


def _record(cluster, job_id: int):
    return parse(cluster.job(job_id).get("AdminComment"))


def test_a_packed_job_whose_turn_comes_with_a_gpu_idle_gets_it_back(idle_cluster):
    cluster = idle_cluster
    fillers = {n: cluster.submit(["-J", "dispatch-fill", "-w", n, "--gres=gpu:2"], SLEEP)
               for n in ("node1", "node2", "node3")}
    for job in fillers.values():
        cluster.wait(job, "RUNNING", 30)
    _view_all_busy(cluster, fillers.values())
    body = b"#!/bin/sh\n# gpupack test dispatch\nsleep 300\n"
    fp = _seed(cluster, "dispatch-new", body)
    # every GPU is held: the packer packs it; it may not start for two minutes (BeginTime)
    job = cluster.submit(["-J", "dispatch-new", "--begin=now+120", "--gres=gpu:1"], body)
    record = _record(cluster, job)
    assert record is not None and (record.verdict, record.fingerprint) == ("packed", fp), record
    assert "shard" in cluster.job(job)["TresPerNode"]

    cluster.run("scancel", str(fillers["node3"]))  # two whole GPUs idle on node3
    wait_for(lambda: (r := _record(cluster, job)) is not None and r.reason == "whole-gpu-at-dispatch", 30,
             "the job's record says its whole GPU was given back")
    tres = cluster.job(job)["TresPerNode"]
    if cluster.release[:2] >= (23, 2):
        assert tres == cluster.tres("gpu:h100:1"), tres
    else:  # 22.05 cannot turn a shard job into a GPU job: every share of the GPU
        assert tres == cluster.tres("shard:h100:5"), tres
    (event,) = wait_for(lambda: events(cluster, "restore-whole", job), 10, "a restore-whole event")
    assert "node3" in event.detail and not event.data.get("shadow")
    assert _record(cluster, job).fingerprint == fp  # its run is history as any other

    cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    cluster.wait(job, "RUNNING", 30)
    assert cluster.job(job)["NodeList"] == "node3"


def test_the_jobs_per_gpu_limit_is_held(idle_cluster):
    # With the share ladder (5 shares an H100 as MIG slices of 10, 20, 40 GB or the whole GPU)
    # no packed combination takes a GPU past 95 % of its memory: the geometry holds that cap
    # (unit tests: tests/unit/packer/ cover the cap itself). What Slurm's shard count does not
    # hold is the jobs-per-GPU limit (2 by default), the replay's limit: held here live.
    cluster = idle_cluster
    whole = [cluster.submit(["-J", "cap-fill", "-w", n, "--gres=gpu:2"], SLEEP) for n in ("node2", "node3")]
    # node1: each GPU holds two jobs of 2 shares (4 of its 5 shares; a third shard:2 does not fit one GPU)
    seniors = [cluster.submit(["-J", f"cap-senior{i}", "-w", "node1", "--gres=shard:2"],
                              SLEEP.replace(b"300", f"30{i}".encode())) for i in (1, 2, 3, 4)]
    for job in (*whole, *seniors):
        cluster.wait(job, "RUNNING", 30)
    # one more share fits Slurm's count (5 of 5) but is a third job on a GPU (limit 2)
    newcomer = cluster.submit(["-J", "cap-newcomer", "--hold", "--gres=shard:1"], SLEEP)
    within_rounds(cluster, lambda: cluster.job(newcomer)["ExcNodeList"] == "node1",
                  "node1 in the pending job's ExcNodeList", after_s=15)
    (steer,) = wait_for(lambda: events(cluster, "steer", newcomer), 10, "a steer event")
    assert "(limit 2 a GPU)" in steer.detail, steer.detail

    cluster.run("scontrol", "release", str(newcomer))
    for _ in range(8):  # the limit holds: it waits rather than put a third job on a GPU
        time.sleep(1)
        assert cluster.state(newcomer) == "PENDING"

    cluster.run("scancel", str(seniors[3]))  # a GPU of node1 has one job left: it may go there now
    cluster.wait(newcomer, "RUNNING", 45)
    assert cluster.job(newcomer)["NodeList"] == "node1"
