"""Regrouping through the monitor's rounds (stateful fake Slurm, a real SQLite file): which plan
runs, which does not (no movable job, budget spent, gain below cost), the signal before the
requeue, the modes."""
from __future__ import annotations

import pytest

from store.ledger import ActionLedger
from packer.config import ConfigError
from slurm_plugin.helper.monitor_settings import MonitorSettings
from slurm_plugin.slurm.fake import FAKE_EPOCH

from tests.unit.helper.rounds_support import make

MOVABLE = "#!/bin/bash\n#SBATCH --requeue\n#SBATCH --signal=B:USR1@30\npython train.py\n"
PLAIN = "#!/bin/bash\npython train.py\n"


def packed(fake, job_id, node, gpu, *, script=MOVABLE, **more):
    fake.submit(job_id=job_id, state="RUNNING", nodes=node, gres="gres:shard:2",
                gres_detail=[f"shard:h100:2(IDX:{gpu})"], start_time=FAKE_EPOCH, script=script,
                admin_comment="gpupack: packed shard:2", **more)


def fragmented(fake, *, movable=True, **more):
    """node1: job 1 (packed, on GPU 0), GPU 1 idle; node2: jobs 3 and 4 (packed, not movable)
    on its two GPUs; job 10 wants 2 whole GPUs on one node and waits."""
    packed(fake, 1, "node1", 0, script=MOVABLE if movable else PLAIN, **more)
    packed(fake, 3, "node2", 0, script=PLAIN)
    packed(fake, 4, "node2", 1, script=PLAIN)
    fake.submit(job_id=10, state="PENDING", state_reason="Resources", gres="gres:gpu:2",
                submit_time=FAKE_EPOCH, priority=4294901000)


def tick(samples, monitor, t):
    samples.clock = float(FAKE_EPOCH + t)
    monitor.tick()


def events(helper, prefix="regroup"):
    return [e for e in reversed(helper.store.events()) if e.kind.startswith(prefix)]


def test_a_movable_packed_job_is_signalled_then_requeued_away_from_the_freed_node(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", regroup_head_wait_s=10)
    fragmented(fake)
    tick(samples, monitor, 5)
    assert not fake.signals and not events(helper)  # the head has not waited long enough
    tick(samples, monitor, 40)
    assert fake.signals == [(1, "USR1", True)]  # the checkpoint signal, to the batch shell
    assert not any(c[0] == "scancel" and not any(a.startswith("--signal") for a in c) for c in fake.calls)
    assert fake.jobs[1].state == "RUNNING"  # it has 30 s to checkpoint
    plan = events(helper, "regroup-plan")[0]
    assert plan.job_id == 10 and plan.data["moves"] == [1] and plan.data["frees"] == "node1:0,node1:1"
    assert plan.data["gain_s"] > plan.data["cost_s"]

    tick(samples, monitor, 55)
    assert fake.jobs[1].state == "RUNNING"  # 15 s into its grace time
    tick(samples, monitor, 71)
    moved = fake.jobs[1]
    assert moved.state == "PENDING" and moved.excluded_nodes == "node1" and moved.priority > 0
    assert [e.kind for e in events(helper)] == ["regroup-plan", "regroup-signal", "regroup-requeue"]
    (row,) = ActionLedger(helper.store).rows("regroup")
    assert row.job_id == 1 and row.mode == "enforce" and row.data["head_job"] == 10
    tick(samples, monitor, 73)  # the head still waits: the moved job stays off the freed node
    assert moved.state == "PENDING" and moved.excluded_nodes == "node1"

    # Slurm starts the head on node1 and the moved job beside job 3
    fake.jobs[10].state, fake.jobs[10].nodes = "RUNNING", "node1"
    fake.jobs[10].gres_detail = ["gpu:h100:2(IDX:0-1)"]
    moved.state, moved.nodes, moved.gres_detail = "RUNNING", "node2", ["shard:h100:2(IDX:0)"]
    tick(samples, monitor, 75)
    kinds = [e.kind for e in events(helper)]
    assert kinds[-1] == "regroup-head-start" and kinds.count("regroup-plan") == 1
    (row,) = ActionLedger(helper.store).rows("regroup")  # planned for +60 s, started at +35 s
    assert row.outcome == "right" and "the plan expected it at +60s" in row.outcome_detail
    assert monitor.state.kept_off == {}  # it runs again elsewhere: the pin is done
    assert not any(c[0] == "scancel" and c[1:] != ["--signal=USR1", "--batch", "1"] for c in fake.calls)


def test_nothing_is_freed_on_a_node_the_head_excludes(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", regroup_head_wait_s=0)
    fragmented(fake)
    fake.jobs[10].excluded_nodes = "node1"  # e.g. kept off node1 by the 22.05 guard
    tick(samples, monitor, 1)
    assert not fake.signals and fake.jobs[1].state == "RUNNING"
    assert [e.kind for e in events(helper)] == ["regroup-skip"]


def test_no_movable_job_no_move(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", regroup_head_wait_s=0)
    fragmented(fake, movable=False)
    for t in (1, 2, 3):
        tick(samples, monitor, t)
    assert not fake.signals and fake.jobs[1].state == "RUNNING"
    (skip,) = events(helper)  # said once, not every round
    assert skip.kind == "regroup-skip" and skip.job_id == 10


def test_an_admin_partition_makes_a_job_movable(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", regroup_head_wait_s=0,
                                          regroup_partitions=["preemptible"])
    fragmented(fake, movable=False, partition="preemptible")
    for node in fake.nodes.values():  # the nodes are in that partition too: somewhere to go
        node.partitions = ("gpu", "preemptible")
    tick(samples, monitor, 1)
    # no checkpoint signal to wait for: requeued at once, away from node1
    assert not fake.signals and fake.jobs[1].state == "PENDING" and fake.jobs[1].excluded_nodes == "node1"
    assert [e.kind for e in events(helper)] == ["regroup-plan", "regroup-requeue"]


def test_requeue_flag_off_is_not_movable_even_with_a_signal(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", regroup_head_wait_s=0)
    fragmented(fake, requeue=False)
    tick(samples, monitor, 1)
    assert not fake.signals and [e.kind for e in events(helper)] == ["regroup-skip"]


def test_a_job_pinned_to_its_node_is_not_moved(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", regroup_head_wait_s=0)
    fragmented(fake, required_nodes="node1")  # -w node1: it could only come back there
    tick(samples, monitor, 1)
    assert not fake.signals and [e.kind for e in events(helper)] == ["regroup-skip"]


def test_gain_below_cost_no_move(tmp_path):
    # every running job ends within 2 minutes: waiting is cheaper than moving
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", regroup_head_wait_s=0)
    fragmented(fake)
    for j in (1, 3, 4):
        fake.jobs[j].time_limit_min = 2
    tick(samples, monitor, 30)
    assert not fake.signals and fake.jobs[1].state == "RUNNING"
    (skip,) = events(helper)
    assert skip.kind == "regroup-skip" and "not worth it" in skip.detail


def test_the_hourly_budget_stops_the_next_plan(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", regroup_head_wait_s=0,
                                          regroup_moves_per_hour=1)
    fragmented(fake)
    tick(samples, monitor, 1)
    tick(samples, monitor, 40)  # signalled at 1, requeued after its 30 s
    assert fake.signals == [(1, "USR1", True)] and fake.jobs[1].state == "PENDING"
    # the same fragmentation again, a new head: the hour's one move is spent
    fake.jobs[10].state = "COMPLETED"
    packed(fake, 2, "node1", 0)
    fake.submit(job_id=11, state="PENDING", gres="gres:gpu:2", submit_time=FAKE_EPOCH, priority=4294901000)
    fake.jobs[1].state = "COMPLETED"
    tick(samples, monitor, 60)
    assert fake.signals == [(1, "USR1", True)] and fake.jobs[2].state == "RUNNING"
    skip = events(helper, "regroup-skip")[-1]
    assert skip.job_id == 11 and "budget" in skip.detail


def test_shadow_records_the_plan_and_touches_nothing(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", regroup_head_wait_s=0,
                                          actions={"regroup": "shadow"})
    fragmented(fake)
    for t in (1, 40, 80):
        tick(samples, monitor, t)
    assert not fake.signals and fake.jobs[1].state == "RUNNING" and not fake.jobs[1].excluded_nodes
    (plan,) = events(helper)
    assert plan.kind == "regroup-plan" and plan.data["shadow"] is True and "would regroup" in plan.detail
    (row,) = ActionLedger(helper.store).rows("regroup")
    assert row.mode == "shadow" and row.job_id == 1
    assert monitor.watches and next(w for w in monitor.watches if w.name == "regroup").budget.used() == 0


def test_off_does_nothing(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", regroup_head_wait_s=0,
                                          actions={"regroup": "off"})
    fragmented(fake)
    tick(samples, monitor, 1)
    assert not fake.signals and not events(helper)


def test_observe_mode_follows_as_shadow(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="observe", regroup_head_wait_s=0)
    fragmented(fake)
    tick(samples, monitor, 1)
    assert not fake.signals and [e.kind for e in events(helper)] == ["regroup-plan"]


@pytest.mark.parametrize("bad", [{"regroup_moves_per_hour": -1}, {"regroup_partitions": "gpu"},
                                 {"regroup_min_gain_ratio": 0.5}, {"actions": {"regroup": "maybe"}},
                                 {"regroup_start_slack_s": -1}])
def test_settings_are_checked(bad):
    with pytest.raises(ConfigError, match="regroup"):
        MonitorSettings(**bad)


# -- the job's own checkpoint reports (the node agent's samples carry them) ----------------------
def test_a_signalled_job_is_requeued_as_soon_as_it_reports_its_checkpoint(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", regroup_head_wait_s=10)
    fragmented(fake)
    samples.put(1, FAKE_EPOCH + 39, last_checkpoint_at=FAKE_EPOCH + 20, checkpoint_every_s=600.0)
    tick(samples, monitor, 40)
    assert fake.signals == [(1, "USR1", True)]
    tick(samples, monitor, 42)
    assert fake.jobs[1].state == "RUNNING"  # its last checkpoint predates the signal: it still waits
    samples.put(1, FAKE_EPOCH + 44, last_checkpoint_at=FAKE_EPOCH + 43, checkpoint_every_s=600.0)
    tick(samples, monitor, 45)
    moved = fake.jobs[1]
    assert moved.state == "PENDING" and moved.excluded_nodes == "node1"  # 25 s before the grace time's end
    (req,) = events(helper, "regroup-requeue")
    assert req.data["waited"] == "checkpoint-report" and req.data["waited_s"] == 5.0
    assert "requeued 2s after its checkpoint report (3s after the signal)" in req.detail


def test_a_signalled_job_that_reports_nothing_waits_the_grace_time(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", regroup_head_wait_s=10)
    fragmented(fake)
    tick(samples, monitor, 40)
    samples.put(1, FAKE_EPOCH + 60, throughput=5.0)  # it reports progress, never a checkpoint
    tick(samples, monitor, 60)
    assert fake.jobs[1].state == "RUNNING"
    tick(samples, monitor, 71)
    assert fake.jobs[1].state == "PENDING"
    (req,) = events(helper, "regroup-requeue")
    assert req.data["waited"] == "grace-time" and "after the signal's grace time 30s" in req.detail


def test_a_requeue_job_that_reports_checkpoints_is_movable_and_moved_at_its_next_one(tmp_path):
    # no --signal: movable by its reports (--requeue, a checkpoint every 120 s, the last at +20 s)
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", regroup_head_wait_s=10)
    fragmented(fake, movable=False)
    samples.put(1, FAKE_EPOCH + 39, last_checkpoint_at=FAKE_EPOCH + 20, checkpoint_every_s=120.0)
    tick(samples, monitor, 40)
    assert not fake.signals and fake.jobs[1].state == "RUNNING"
    assert [e.kind for e in events(helper)] == ["regroup-plan", "regroup-wait"]
    wait = events(helper, "regroup-wait")[0]
    assert wait.data["expected_s"] == 100.0  # its next boundary, +140 s
    tick(samples, monitor, 120)
    assert fake.jobs[1].state == "RUNNING"
    samples.put(1, FAKE_EPOCH + 141, last_checkpoint_at=FAKE_EPOCH + 140.5, checkpoint_every_s=120.0)
    tick(samples, monitor, 142)
    assert fake.jobs[1].state == "PENDING" and fake.jobs[1].excluded_nodes == "node1"
    (req,) = events(helper, "regroup-requeue")
    assert req.data["waited"] == "checkpoint-report" and "after the decision" in req.detail


def test_a_report_only_job_whose_report_is_overdue_is_requeued_at_the_bound(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", regroup_head_wait_s=10)
    fragmented(fake, movable=False)
    samples.put(1, FAKE_EPOCH + 39, last_checkpoint_at=FAKE_EPOCH + 20, checkpoint_every_s=120.0)
    tick(samples, monitor, 40)
    tick(samples, monitor, 144)  # the boundary (+140 s) and its slack (5 s) not yet past
    assert fake.jobs[1].state == "RUNNING"
    tick(samples, monitor, 146)
    assert fake.jobs[1].state == "PENDING"
    (req,) = events(helper, "regroup-requeue")
    assert req.data["waited"] == "report-overdue" and "no checkpoint report by its expected boundary" in req.detail


def test_reports_of_an_earlier_run_do_not_make_a_job_movable(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, mode="enforce", regroup_head_wait_s=10)
    fragmented(fake, movable=False)
    # the sample is from before this run started (its earlier run, before a requeue)
    samples.put(1, FAKE_EPOCH - 50, last_checkpoint_at=FAKE_EPOCH - 60, checkpoint_every_s=120.0)
    tick(samples, monitor, 40)
    assert [e.kind for e in events(helper)] == ["regroup-skip"] and fake.jobs[1].state == "RUNNING"
