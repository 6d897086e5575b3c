"""Shadow mode and the action ledger, through the monitor's rounds (stateful fake Slurm,
scripted samples, a real SQLite file): decisions, their outcomes, misses, and the report."""
from __future__ import annotations

import json

from click.testing import CliRunner

from store.ledger import ActionLedger
from slurm_plugin.slurm.fake import FAKE_EPOCH

from tests.unit.helper.rounds_support import GIB, make, running


def ledger(helper) -> ActionLedger:
    return ActionLedger(helper.store)


def outcome_events(helper):
    return [e for e in helper.store.events() if e.kind == "action-outcome"]


def slow_neighbour(fake, samples, monitor, *, senior_speed=20.0, slowed=15.0, until=16):
    """Job 1 alone at `senior_speed`, then job 2 arrives and job 1 drops to `slowed`."""
    running(fake, 1, fp="aaaa")
    for t in range(10):
        samples.put(1, FAKE_EPOCH + t, throughput=senior_speed)
        monitor.tick()
    running(fake, 2, fp="bbbb", start=FAKE_EPOCH + 10)
    for t in range(10, until):
        if fake.jobs[2].state != "RUNNING":  # requeued (enforce)
            return t
        samples.put(1, FAKE_EPOCH + t, throughput=slowed)
        samples.put(2, FAKE_EPOCH + t, throughput=30.0, started_at=FAKE_EPOCH + 10)
        monitor.tick()
    return until


def newcomer_leaves(fake, samples, monitor, *, senior_after: float, start=16, rounds=6):
    fake.jobs[2].state = "COMPLETED"
    samples.now.pop(2)
    for t in range(start, start + rounds):
        samples.put(1, FAKE_EPOCH + t, throughput=senior_after)
        monitor.tick()


def test_shadow_contention_is_an_event_and_right_when_the_neighbour_recovers(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="observe")
    slow_neighbour(fake, samples, monitor)
    assert fake.jobs[2].state == "RUNNING"  # shadow: nothing done
    (event,) = [e for e in helper.store.events() if e.kind == "requeue-contention"]
    assert event.detail.startswith("would requeue (observe mode): job 1 lost 25%") and event.data["shadow"]
    (row,) = ledger(helper).rows()
    assert (row.job_id, row.mode, row.outcome) == (2, "shadow", None)
    assert row.data["hurt"][0]["job_id"] == 1 and row.data["hurt"][0]["before"] == 20.0
    newcomer_leaves(fake, samples, monitor, senior_after=19.5)
    (row,) = ledger(helper).rows()
    assert row.outcome == "right" and "job 1 19.5/s (before 20/s)" in row.outcome_detail
    assert row.data["left_at"] == FAKE_EPOCH + 16
    (event,) = outcome_events(helper)
    assert event.job_id == 2 and "requeue-contention (shadow) was right" in event.detail


def test_shadow_contention_is_wrong_when_the_neighbour_stays_slow(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="observe")
    slow_neighbour(fake, samples, monitor)
    newcomer_leaves(fake, samples, monitor, senior_after=15.0)
    (row,) = ledger(helper).rows()
    assert row.outcome == "wrong" and "did not recover" in row.outcome_detail


def test_an_action_in_shadow_while_the_helper_enforces_leaves_the_job_and_the_pairs_alone(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", actions={"requeue-contention": "shadow"})
    slow_neighbour(fake, samples, monitor)
    assert fake.jobs[2].state == "RUNNING" and not helper.store.pairs.must_avoid("aaaa", "bbbb")
    (event,) = [e for e in helper.store.events() if e.kind == "requeue-contention"]
    assert event.detail.startswith("would requeue (shadow mode)")


def test_enforced_contention_records_its_outcome_after_the_requeue(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce")
    t = slow_neighbour(fake, samples, monitor)
    assert fake.jobs[2].state == "PENDING"
    samples.now.pop(2)
    for t in range(t, t + 6):
        samples.put(1, FAKE_EPOCH + t, throughput=20.0)
        monitor.tick()
    (row,) = ledger(helper).rows()
    assert (row.mode, row.outcome) == ("enforce", "right")


def test_a_newcomer_that_slowed_its_neighbour_with_the_action_off_is_a_miss(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", actions={"requeue-contention": "off"})
    slow_neighbour(fake, samples, monitor)
    assert not [e for e in helper.store.events() if e.kind == "requeue-contention"]
    newcomer_leaves(fake, samples, monitor, senior_after=20.0)
    (row,) = ledger(helper).rows()
    assert (row.job_id, row.mode, row.outcome) == (2, "none", "missed")
    assert "recovered when it left" in row.outcome_detail


def test_no_miss_when_the_neighbour_was_not_slowed(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", actions={"requeue-contention": "off"})
    slow_neighbour(fake, samples, monitor, slowed=19.5)
    newcomer_leaves(fake, samples, monitor, senior_after=20.0)
    assert ledger(helper).rows() == []


def grow_until_decided(fake, samples, monitor, helper, job_id=7):
    """2 GiB + 0.3 GiB/s on shard:1 (10 GiB) until the memory restart is decided."""
    running(fake, job_id, fp="grow", shards=1)
    for t in range(40):
        samples.put(job_id, FAKE_EPOCH + t, mem=int(2 * GIB + t * 0.3 * GIB))
        monitor.tick()
        if ledger(helper).rows():
            return t
    raise AssertionError("no memory decision")


def test_shadow_memory_restart_is_right_when_the_job_goes_over_its_share(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="observe", memory_horizon_s=60)
    t = grow_until_decided(fake, samples, monitor, helper)
    assert fake.jobs[7].state == "RUNNING" and helper.store.remembered_size("grow") is None
    (row,) = ledger(helper).rows()
    assert row.mode == "shadow" and row.outcome is None and row.data["capacity_bytes"] == 10 * GIB
    for t in range(t + 1, 40):
        samples.put(7, FAKE_EPOCH + t, mem=int(2 * GIB + t * 0.3 * GIB))
        monitor.tick()
    (row,) = ledger(helper).rows()
    assert row.outcome == "right" and "over its share of 10.0GiB" in row.outcome_detail


def test_shadow_memory_restart_is_wrong_when_the_job_levels_off_and_completes_below(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="observe", memory_horizon_s=60)
    t = grow_until_decided(fake, samples, monitor, helper)
    flat = int(2 * GIB + t * 0.3 * GIB)
    for t in range(t + 1, t + 5):
        samples.put(7, FAKE_EPOCH + t, mem=flat)
        monitor.tick()
    fake.jobs[7].state = "COMPLETED"
    samples.now.clear()
    monitor.tick()
    (row,) = ledger(helper).rows()
    assert row.outcome == "wrong" and "ended COMPLETED" in row.outcome_detail
    assert not [r for r in ledger(helper).rows() if r.outcome == "missed"]


def test_enforced_memory_restart_is_right_when_the_next_run_needs_more_than_the_old_share(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", memory_horizon_s=60)
    grow_until_decided(fake, samples, monitor, helper)
    assert fake.jobs[7].state == "PENDING"
    samples.now.clear()
    monitor.tick()
    assert ledger(helper).rows()[0].outcome is None  # waits for the next run
    rerun = fake.jobs[7]  # Slurm starts it again, on its new size
    rerun.state, rerun.nodes, rerun.gres_detail = "RUNNING", "node1", ["shard:h100:3(IDX:0)"]
    for t in range(100, 104):
        samples.put(7, FAKE_EPOCH + t, mem=11 * GIB, started_at=FAKE_EPOCH + 100)
        monitor.tick()
    (row,) = ledger(helper).rows()
    assert (row.mode, row.outcome) == ("enforce", "right")


def test_a_run_out_of_memory_with_no_decision_is_a_miss_and_the_report_counts_it(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", actions={"restart-memory": "off"})
    running(fake, 8, fp="jump", shards=1)
    samples.put(8, FAKE_EPOCH, mem=2 * GIB)
    monitor.tick()
    samples.put(8, FAKE_EPOCH + 1, mem=int(9.9 * GIB))
    monitor.tick()
    fake.jobs[8].state = "FAILED"
    samples.now.clear()
    monitor.tick()
    (row,) = ledger(helper).rows()
    assert (row.action, row.job_id, row.outcome) == ("restart-memory", 8, "missed")
    from slurm_plugin.cli.actions_cmd import actions

    out = CliRunner().invoke(actions, ["report", "--database", str(helper.paths.database), "--json"])
    assert out.exit_code == 0, out.output
    by = {s["action"]: s for s in json.loads(out.output)}
    assert by["restart-memory"]["missed"] == 1 and by["restart-memory"]["recall"] == 0.0
    assert by["restart-memory"]["precision"] is None
    table = CliRunner().invoke(actions, ["report", "--database", str(helper.paths.database)])
    assert table.exit_code == 0 and "restart-memory" in table.output and "precision" in table.output
    missing = CliRunner().invoke(actions, ["report", "--database", str(tmp_path / "none.db")])
    assert missing.exit_code == 1 and "no gpupack database" in missing.output
