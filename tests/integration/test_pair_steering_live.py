"""Steering by pair prediction on the real cluster: a pending packed job is kept off the node
whose busy GPUs all run jobs measured to slow down beside its workload.

Uses the session fixture `cluster` (3 nodes x 2 simulated H100s, 5 shares a GPU, helper in
enforce mode). The measured pairs are seeded in the helper's store, as the contention watch
records them (`Store.pairs.record_pair_speed`: the senior's speed beside the newcomer).
"""
from __future__ import annotations

import uuid

import pytest

from e2e_support import SLEEP, events, through_rounds, wait_for, within_rounds
from store.db import Store
from slurm_plugin.helper.watches.tracks import Fingerprints
from slurm_plugin.slurm.runner import SlurmRunner

pytestmark = pytest.mark.integration


def fingerprint(cluster, job_id: int) -> str:
    """The fingerprint the helper knows the job by (its record's, else its batch script's)."""
    runner = SlurmRunner(env=cluster.env)
    fp = Fingerprints(lambda: runner)(runner.job(job_id))
    assert fp, f"job {job_id} has no fingerprint"
    return fp


def test_a_pending_job_is_kept_off_the_node_where_it_would_slow_every_packed_job(idle_cluster):
    cluster = idle_cluster
    # workloads of their own (a no-op line, not a comment: the fingerprint ignores comments):
    # the pair speeds a run of this test records stay in the cluster's store for the next run
    sleep = SLEEP.replace(b"sleep", f": {uuid.uuid4().hex}\nsleep".encode(), 1)
    # node1: both GPUs packed (4 of 5 shares each: one senior a GPU, room for 1 more share on either)
    seniors = [cluster.submit(["-J", f"pairs-senior{i}", "-w", "node1", "--gres=shard:4"],
                              sleep.replace(b"300", f"30{i}".encode())) for i in (1, 2)]
    for job in seniors:
        cluster.wait(job, "RUNNING", 30)
    newcomer = cluster.submit(["-J", "pairs-newcomer", "--hold", "--gres=shard:1"], sleep)
    fps = [fingerprint(cluster, j) for j in seniors]
    fp_new = fingerprint(cluster, newcomer)
    assert len({*fps, fp_new}) == 3
    assert cluster.job(newcomer)["ExcNodeList"] in ("", "(null)")

    store = Store(cluster.spec.database)
    try:
        store.pairs.record_pair_speed(fps[0], fp_new, 0.6)  # senior 1 kept 60 % of its speed beside it
        store.pairs.record_pair_speed(fps[1], fp_new, 0.7)
    finally:
        store.close()

    # 15 s, and then the watcher's next whole rounds (a round's cycle is up to 20 s on a loaded machine)
    within_rounds(cluster, lambda: cluster.job(newcomer)["ExcNodeList"] == "node1", "node1 in the pending job's ExcNodeList",
                  after_s=15)
    (steer,) = wait_for(lambda: events(cluster, "steer", newcomer), 10, "a steer event")
    assert f"predicted slowdown with job {seniors[0]} ({fps[0]}): 0.60" in steer.detail
    assert f"predicted slowdown with job {seniors[1]} ({fps[1]}): 0.70" in steer.detail

    cluster.run("scontrol", "release", str(newcomer))
    cluster.wait(newcomer, "RUNNING", 30)
    assert cluster.job(newcomer)["NodeList"] in ("node2", "node3")  # not beside a slowed senior

    # a senior ends: node1 has a free GPU again, and the next copy may go there
    cluster.run("scancel", str(seniors[1]))
    again = cluster.submit(["-J", "pairs-newcomer", "--hold", "--gres=shard:1"], sleep)
    wait_for(lambda: cluster.state(seniors[1]) not in ("RUNNING", "COMPLETING"), 20, "the senior gone")

    def not_kept_off() -> None:
        assert cluster.job(again)["ExcNodeList"] in ("", "(null)")

    through_rounds(cluster, not_kept_off, rounds=2)  # whole watcher rounds ran: nothing keeps it off node1
