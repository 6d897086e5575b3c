"""History on the controller, on the real cluster: a run's
figures reach the controller's store from the agents through the helper (its monitor, the
controller's epilog, its sweep), and a script that differs from it only in an argument value
is packed from it; only a completed run whose samples cover it is a measurement; a cancelled run, and a run that ended while its agent was down, are lower bounds."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest
from e2e_support import simgpu_script, wait_for

from packer.comment import parse
from store.db import RunRecord, Store
from store.levels import LevelStore
from slurm_plugin.agent import client

pytestmark = pytest.mark.integration
DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}
GIB = 1024**3


def runs_of(cluster, job_id: int) -> list[RunRecord]:
    store = Store(cluster.spec.database)
    try:
        return [r for r in store.runs(limit=500) if r.job_id == job_id]
    finally:
        store.close()


def history_events(cluster, job_id: int) -> list:
    store = Store(cluster.spec.database)
    try:
        return [e for e in store.events(limit=500, job_id=job_id) if e.kind == "history"]
    finally:
        store.close()


def variant_guesses(cluster) -> list[dict]:
    store = Store(cluster.spec.database)
    try:
        return [g for g in LevelStore(store).guesses() if g["level"] == "variant" and g["right"] == 1]
    finally:
        store.close()


def record_of(cluster, job_id: int):
    record = parse(cluster.job(job_id)["AdminComment"])
    assert record is not None, cluster.job(job_id)
    return record


def agent_pid(cluster, node: str) -> int:
    procs = json.loads((cluster.state_dir / "run" / "processes.json").read_text())
    return next(p["pid"] for p in procs if p["role"] == "agent" and p["name"] == node)


@pytest.fixture
def packing(idle_cluster):
    idle_cluster.set_option("pack_only_when_no_idle_gpu", "false")  # pack even while GPUs are idle
    try:
        yield idle_cluster
    finally:
        idle_cluster.reset_options()


def test_a_packed_jobs_peak_lands_in_the_controllers_store_and_its_next_run_is_packed_from_it(packing):
    cluster = packing
    body = simgpu_script("--mem-start 3GiB --iters 40 --iter-ms 50 --workload ResNet18", tag="history-packed")
    args = ["--gres=gpu:1", "-J", "history-packed"]
    first = cluster.submit(args, body)
    assert cluster.wait(first, DONE, 90) == "COMPLETED"
    assert record_of(cluster, first).verdict == "exclusive"  # no history yet: profiled on a whole GPU
    (run,) = wait_for(lambda: runs_of(cluster, first), 60, "the first run in the controller's store")
    assert not run.lower_bound and run.end_state == "completed" and run.peak_mem_bytes >= 3 * GIB

    second = cluster.submit(args, body)
    assert cluster.wait(second, DONE, 90) == "COMPLETED"
    packed = record_of(cluster, second)
    assert packed.verdict == "packed" and packed.fields.get("src") == "history(1)", packed
    (run,) = wait_for(lambda: runs_of(cluster, second), 60, "the packed run in the controller's store")
    assert not run.lower_bound and run.peak_mem_bytes >= 3 * GIB and run.fingerprint == packed.fingerprint
    assert len(history_events(cluster, second)) == 1  # seen by several paths, recorded once
    # the controller's epilog told the helper (as SlurmUser, over its local socket)
    log = (cluster.state_dir / "log" / "ctld-epilog.log").read_text()
    assert f"job {second} on " in log and "told the helper" in log, log[-2000:]

    # the same script with another argument value has no run of its own: it is packed from its
    # variant's runs (issue 34), its AdminComment naming the level, and counts as a right guess
    edited = cluster.submit(args, body.replace(b"--iters 40", b"--iters 30"))
    assert cluster.wait(edited, DONE, 90) == "COMPLETED"
    record = record_of(cluster, edited)
    assert record.verdict == "packed" and record.fields.get("lvl") == "variant", record
    assert record.fields.get("src") == "history(2)" and record.fingerprint != packed.fingerprint, record
    wait_for(lambda: variant_guesses(cluster), 60, "the variant level's right guess in the controller's store")

    third = cluster.submit(args, body)
    cluster.wait(third, {"RUNNING", *DONE}, 60)
    assert record_of(cluster, third).fields.get("src") == "history(2)"  # packed from both runs


def test_a_cancelled_run_is_not_recorded_as_a_measurement(packing):
    cluster = packing
    body = simgpu_script("--mem-start 2GiB --mem-growth 20MiB --iters 2000 --iter-ms 50", tag="history-cancelled")
    job = cluster.submit(["--gres=gpu:1", "-J", "history-cancelled"], body)
    cluster.wait(job, "RUNNING", 60)
    time.sleep(4)  # sampled a few times
    cluster.run("scancel", str(job))
    assert cluster.wait(job, DONE, 60) == "CANCELLED"
    (run,) = wait_for(lambda: runs_of(cluster, job), 60, "the cancelled run in the store")
    assert run.lower_bound and run.end_state == "cancelled" and run.peak_mem_bytes >= 2 * GIB
    again = cluster.submit(["--gres=gpu:1", "-J", "history-cancelled"], body)
    record = record_of(cluster, again)
    assert (record.verdict, record.fields.get("reason")) == ("exclusive", "no-history")  # not packed from it
    assert record.fields.get("src") == "lower-bound(1)"


def test_a_job_ending_while_its_agent_is_down_is_recorded_as_a_lower_bound_once_the_agent_is_back(idle_cluster):
    cluster, node = idle_cluster, "node1"
    body = simgpu_script("--mem-start 1GiB --mem-growth 2MiB --iters 400 --iter-ms 50", tag="history-agent-down")
    job = cluster.submit(["--gres=shard:1", "-w", node, "-J", "history-agent-down"], body)
    cluster.wait(job, "RUNNING", 60)
    time.sleep(4)  # sampled, by the agent and by the helper
    os.kill(agent_pid(cluster, node), signal.SIGKILL)
    try:
        assert cluster.wait(job, DONE, 90) == "COMPLETED"  # about 15 s nobody sampled
        time.sleep(3)
    finally:
        cluster.dev.up()  # starts what is not running: the agent of node1
    final = wait_for(lambda: client.final_stats(cluster.node_view(node), node, job, wait_s=0.5), 30,
                     "the restarted agent's summary of the job")
    assert final["gaps"] > 10, final
    # the sweep (every 30 s) brings the summary to the store, merged into the monitor's row
    (run,) = wait_for(lambda: [r for r in runs_of(cluster, job) if r.peak_mem_bytes >= final["peak_mem_bytes"]],
                      75, "the run with the agent's figures")
    assert run.lower_bound and "without samples" in run.end_state, run
    assert len(history_events(cluster, job)) == 1
