"""Regrouping on the real cluster: the steps of `gpupack demo --scenario regroup`.

A packed job on a GPU of each node: a 2-GPU job waits (Slurm: Resources). The one packed job
that declared it can be moved (`--requeue`, `--signal=B:USR1@10`) gets its checkpoint signal
(delivered to its batch shell, not a cancel), is requeued after the grace time with its node
excluded, restarts elsewhere, and the 2-GPU job starts on the freed node. Asserted through
Slurm itself (states, restart counts, node lists) and the event log.

The second test moves a simulated GPU workload that reports its checkpoints to the node
agent (`simgpu run --checkpoint-every N`) and declares a long grace time
(`--signal=B:USR1@60`): on the signal it checkpoints after its iteration and reports it, and
the watch requeues it at that report, long before the 60 s.

Uses `idle_cluster` of tests/integration/e2e_support.py (the session's `cluster`, emptied).
"""
from __future__ import annotations

import sys

import pytest

from store.ledger import ActionLedger
from store.db import Store
from slurm_plugin.cli.demo_regroup import GRACE_S, checkpointing_script, run_regroup
from slurm_plugin.slurm.runner import SlurmRunner

pytestmark = pytest.mark.integration


def test_a_movable_packed_job_is_moved_and_the_two_gpu_job_starts_on_its_node(idle_cluster):
    cluster = idle_cluster
    out = run_regroup(cluster.env, cluster.workdir, cluster.spec.database, timeout=240)
    kinds = [e["kind"] for e in out.events]
    order = ["regroup-plan", "regroup-signal", "regroup-requeue", "regroup-head-start"]
    assert [k for k in kinds if k in order] == order, out.events
    plan = next(e for e in out.events if e["kind"] == "regroup-plan")
    assert plan["job"] == out.head and plan["data"]["moves"] == [out.movable]
    assert plan["data"]["frees"] == f"{out.freed_node}:0,{out.freed_node}:1"
    signal, requeue = (next(e for e in out.events if e["kind"] == k) for k in ("regroup-signal", "regroup-requeue"))
    assert signal["job"] == requeue["job"] == out.movable and signal["data"]["signal"] == "USR1"
    assert requeue["at"] - signal["at"] >= GRACE_S - 1  # it waited for the checkpoint's grace time
    assert requeue["data"]["excluded"] == [out.freed_node]

    # what Slurm says: the head runs on the freed node, the moved job restarted once elsewhere,
    # the jobs that did not declare they can be moved were not touched
    runner = SlurmRunner(env=cluster.env)
    head, moved = runner.job(out.head), runner.job(out.movable)
    assert head.base_state == "RUNNING" and head.nodes == out.freed_node
    assert (moved.restart_cnt or 0) == 1 and moved.base_state in ("RUNNING", "PENDING")
    if moved.base_state == "RUNNING":
        assert moved.nodes != out.freed_node
    assert all((runner.job(j).restart_cnt or 0) == 0 and runner.job(j).base_state == "RUNNING" for j in out.others)
    # the signal reached its batch shell (a checkpoint line) and it was not cancelled (it ran again)
    assert "checkpoint at" in out.movable_output and "start (restart 1)" in out.movable_output, out.movable_output
    assert out.ok

    # the decision's outcome in the action ledger: judged in the round that saw the head run
    # (the outcome watch runs before the regroup watch writes regroup-head-start)
    store = Store(cluster.spec.database)
    try:
        rows = [r for r in ActionLedger(store, create=False).rows("regroup")
                if r.job_id == out.movable and r.data.get("head_job") == out.head]
    finally:
        store.close()
    assert rows and rows[-1].mode == "enforce" and rows[-1].outcome == "right", rows
    assert "the plan expected it at" in rows[-1].outcome_detail


LONG_GRACE_S = 60


def test_a_job_that_reports_its_checkpoint_is_requeued_at_the_report_not_the_grace_time(idle_cluster):
    cluster = idle_cluster
    out = run_regroup(cluster.env, cluster.workdir, cluster.spec.database, timeout=240,
                      movable_script=checkpointing_script(sys.executable, LONG_GRACE_S))
    kinds = [e["kind"] for e in out.events]
    order = ["regroup-plan", "regroup-signal", "regroup-requeue", "regroup-head-start"]
    assert [k for k in kinds if k in order] == order, out.events
    signal, requeue = (next(e for e in out.events if e["kind"] == k) for k in ("regroup-signal", "regroup-requeue"))
    assert signal["job"] == requeue["job"] == out.movable and signal["data"]["grace_s"] == LONG_GRACE_S
    # requeued at its checkpoint report, well before the grace time
    assert requeue["data"]["waited"] == "checkpoint-report", requeue
    assert requeue["at"] - signal["at"] < LONG_GRACE_S / 3, (signal, requeue)
    assert "after its checkpoint report" in requeue["detail"] and "after the signal" in requeue["detail"]
    assert requeue["data"]["excluded"] == [out.freed_node]

    runner = SlurmRunner(env=cluster.env)
    head, moved = runner.job(out.head), runner.job(out.movable)
    assert head.base_state == "RUNNING" and head.nodes == out.freed_node
    assert head.start_time is not None and head.start_time.timestamp() - signal["at"] < LONG_GRACE_S
    assert (moved.restart_cnt or 0) == 1 and moved.base_state in ("RUNNING", "PENDING")
    if moved.base_state == "RUNNING":
        assert moved.nodes != out.freed_node
    assert all((runner.job(j).restart_cnt or 0) == 0 and runner.job(j).base_state == "RUNNING" for j in out.others)
    # the workload got the signal (its checkpoint line) and ran again
    assert "(on signal USR1)" in out.movable_output and "start (restart 1)" in out.movable_output, out.movable_output
    assert out.ok
