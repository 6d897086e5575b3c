"""Shadow mode on the real cluster: in observe mode the memory restart is
decided, logged as an event and written to the action ledger, the job is left running, and
its outcome (it ran out of its share) is recorded; `gpupack actions report` counts it.

Uses the session fixture `cluster` of tests/integration/conftest.py.
"""
from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from e2e_support import events, fill_all_but_one_gpu, simgpu_script, wait_for
from store.ledger import ActionLedger
from store.db import Store

pytestmark = pytest.mark.integration



def ledger_rows(cluster, job_id: int, action: str):
    store = Store(cluster.spec.database)
    try:
        return [r for r in ActionLedger(store).rows(action) if r.job_id == job_id]
    finally:
        store.close()


def report(cluster) -> dict[str, dict]:
    from slurm_plugin.cli.actions_cmd import actions

    out = CliRunner().invoke(actions, ["report", "--database", str(cluster.spec.database), "--json"])
    assert out.exit_code == 0, out.output
    return {s["action"]: s for s in json.loads(out.output)}


def simgpu(args: str) -> bytes:
    return simgpu_script(args, tag="gpupack shadow test")


@pytest.fixture
def observe(cluster):
    cluster.set_mode("observe")  # the run-time actions follow the helper's mode: shadow
    time.sleep(2)  # the helper reloads gpupack.toml on its mtime
    try:
        yield cluster
    finally:
        cluster.cancel_all()
        cluster.set_mode("enforce")


def test_shadow_contention_requeue_leaves_the_newcomer_and_is_judged_when_it_ends(observe):
    cluster = observe
    senior = cluster.submit(["-J", "shadow-senior", "-w", "node1", "--gres=shard:2"],
                            simgpu("--workload ResNet18 --mem-start 2GiB --iters 3000 --iter-ms 50"))
    cluster.wait(senior, "RUNNING", 30)
    fill_all_but_one_gpu(cluster, "shadow")  # node1's other GPU, node2 and node3 busy
    time.sleep(8)  # the senior's speed alone
    # the newcomer runs ~25 s beside the senior, then ends by itself. Not pinned with -w: a
    # pinned job is never requeued away from its node (it would wait for good), in shadow
    # mode as in enforce mode (test_safety_live.py)
    newcomer = cluster.submit(["-J", "shadow-newcomer", "--gres=shard:2"],
                              simgpu("--workload LSTM --mem-start 2GiB --iters 500 --iter-ms 50"))
    cluster.wait(newcomer, "RUNNING", 30)
    assert cluster.job(newcomer)["NodeList"] == "node1"
    (row,) = wait_for(lambda: ledger_rows(cluster, newcomer, "requeue-contention"), 40, "a shadow contention decision")
    assert row.mode == "shadow" and row.data["hurt"][0]["job_id"] == senior
    assert row.data["hurt"][0]["loss"] > row.data["threshold"]
    (event,) = events(cluster, "requeue-contention", newcomer)
    assert event.detail.startswith("would requeue (observe mode): job") and "lost" in event.detail
    assert cluster.state(newcomer) == "RUNNING" and int(cluster.job(newcomer)["Restarts"]) == 0
    assert cluster.wait(newcomer, {"COMPLETED", "FAILED"}, 90) == "COMPLETED"  # left alone to its end
    assert cluster.state(senior) == "RUNNING"
    (row,) = wait_for(lambda: [r for r in ledger_rows(cluster, newcomer, "requeue-contention") if r.outcome],
                      30, "the contention outcome")
    assert row.outcome == "right", row.outcome_detail  # the senior's speed came back
    assert "recovered" in row.outcome_detail and "left_at" in row.data
    (outcome,) = events(cluster, "action-outcome", newcomer)
    assert "requeue-contention (shadow) was right" in outcome.detail
    contention = report(cluster)["requeue-contention"]
    assert contention["shadow"] >= 1 and contention["right"] >= 1 and contention["precision"] is not None


def test_a_run_out_of_memory_in_observe_mode_is_in_the_ledger_either_as_a_right_decision_or_a_miss(observe):
    """The forecaster decides at most one sample before the crossing (a load's reach), so
    whether it catches this run depends on when the samples land; the ledger must hold the
    run either way: a shadow decision judged right, or a miss (recall's denominator)."""
    cluster = observe
    # shard:1 is one MIG memory slice (~10 GiB): 2 GiB + 200 MiB/s runs out after ~40 s
    job = cluster.submit(["-J", "shadow-grow", "-t", "2", "--gres=shard:1"],
                         simgpu("--mem-start 2GiB --mem-growth 10MiB --iters 2000 --iter-ms 50"))
    assert cluster.wait(job, {"COMPLETED", "FAILED", "OUT_OF_MEMORY"}, 120) in ("FAILED", "OUT_OF_MEMORY")
    assert int(cluster.job(job)["Restarts"]) == 0  # shadow: never requeued
    (row,) = wait_for(lambda: [r for r in ledger_rows(cluster, job, "restart-memory") if r.outcome], 20, "its row")
    if row.mode == "shadow":
        assert row.outcome == "right", row.outcome_detail
        (event,) = events(cluster, "restart-memory", job)
        assert event.detail.startswith("would requeue (observe mode): memory will outgrow shard:1")
    else:
        assert (row.mode, row.outcome) == ("none", "missed") and "no memory restart decided" in row.outcome_detail
    memory = report(cluster)["restart-memory"]
    assert memory["right"] + memory["missed"] >= 1 and memory["recall"] is not None
