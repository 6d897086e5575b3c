"""Outcomes of grow-preempt and regroup decisions, through the monitor's rounds (stateful
fake Slurm, scripted samples, a real SQLite file): the ledger rows are written as the grow and
regroup watches write them; what happens next decides them."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from store.ledger import ActionLedger
from packer.config import PackerConfig
from packer.samples import JobSample
from store.db import Store
from slurm_plugin.helper.monitor import Monitor
from slurm_plugin.helper.monitor_settings import MonitorSettings
from slurm_plugin.slurm.fake import FAKE_EPOCH, FakeSlurm
from slurm_plugin.slurm.runner import SlurmRunner

GIB = 1024**3
ALL_OFF = {"requeue-contention": "off", "restart-memory": "off", "grow-preempt": "off", "regroup": "off"}


@dataclass
class FakePaths:
    socket: Path
    database: Path
    slurm_conf: Path | None = None


class FakeHelper:
    def __init__(self, tmp_path: Path):
        self.paths = FakePaths(socket=tmp_path / "run" / "helper.sock", database=tmp_path / "gpupack.db")
        self.store = Store(self.paths.database)
        self._config = PackerConfig(mode="enforce")

    def config(self) -> PackerConfig:
        return self._config


class World:
    """The fake cluster, the scripted agent and the monitor's clock."""

    def __init__(self, tmp_path: Path):
        self.fake, self.helper, self.now = FakeSlurm(), FakeHelper(tmp_path), float(FAKE_EPOCH)
        self.samples: dict[int, JobSample] = {}
        # the actions themselves are off: only the rows written here are judged
        self.monitor = Monitor(self.helper, runner=SlurmRunner(executor=self.fake),
                               samples=lambda nodes: list(self.samples.values()),
                               settings=MonitorSettings(skip_requeue_delay=False, actions=ALL_OFF),
                               clock=lambda: self.now)
        self.ledger = ActionLedger(self.helper.store)
        self.share = self.helper.config().share_bytes

    def run(self, job_id: int, start: float, shards: int = 2) -> None:
        self.fake.submit(job_id=job_id, state="RUNNING", nodes="node1", gres=f"gres:shard:{shards}",
                         gres_detail=[f"shard:h100:{shards}(IDX:0)"], start_time=int(start),
                         admin_comment=f"gpupack: packed shard:{shards} fp=fp{job_id}")

    def tick(self, at: float, **mem: float) -> None:
        self.now = at
        self.samples = {}
        for key, used in mem.items():
            job_id = int(key[1:])
            start = float(self.fake.jobs[job_id].start_time)
            self.samples[job_id] = JobSample(job_id=job_id, node="node1", gpu_index=0, at=at, mem_bytes=int(used),
                                             peak_mem_bytes=int(used), isolation="shard:2", started_at=start)
        self.monitor.tick()

    def row(self):
        (row,) = self.ledger.rows()
        return row


def grow_row(w: World, mode: str, *, at: float, evicted=(8,), running=True, from_shards=2) -> None:
    w.ledger.record("grow-preempt", 7, FAKE_EPOCH, mode, "memory forecast 5.0GiB outgrows its share", at,
                    gpu="node1:0", node="node1", from_shards=from_shards, to_shards=4, evicted=list(evicted),
                    lost_work_s=12.0, running=running, steps=[])


def test_enforced_growth_is_right_once_the_grown_run_passes_its_old_share_and_the_evicted_job_restarted(tmp_path):
    w = World(tmp_path)
    w.run(7, FAKE_EPOCH)
    w.tick(FAKE_EPOCH + 1, j7=1.5 * w.share)
    grow_row(w, "enforce", at=FAKE_EPOCH + 2)
    w.fake.jobs[7].state = "PENDING"  # requeued to restart bigger; job 8 evicted, held
    w.fake.submit(job_id=8, state="PENDING")
    w.tick(FAKE_EPOCH + 3)
    assert w.row().outcome is None
    w.run(7, FAKE_EPOCH + 10, shards=4)  # the grown run
    w.tick(FAKE_EPOCH + 11, j7=1.5 * w.share)
    assert w.row().outcome is None  # within its old share so far
    w.tick(FAKE_EPOCH + 12, j7=2.5 * w.share)
    assert w.row().outcome is None  # past it, but job 8 has not started again
    w.run(8, FAKE_EPOCH + 13)
    w.tick(FAKE_EPOCH + 14, j7=2.6 * w.share, j8=GIB)
    row = w.row()
    assert row.outcome == "right" and "past its old share" in row.outcome_detail
    assert "job(s) 8 started again" in row.outcome_detail
    (event,) = [e for e in w.helper.store.events() if e.kind == "action-outcome"]
    assert event.data["action"] == "grow-preempt" and event.data["outcome"] == "right"
    from slurm_plugin.cli.actions_cmd import actions

    out = CliRunner().invoke(actions, ["report", "--database", str(w.helper.paths.database), "--json"])
    by = {s["action"]: s for s in json.loads(out.output)}
    assert (by["grow-preempt"]["enforce"], by["grow-preempt"]["right"], by["grow-preempt"]["precision"]) == (1, 1, 1.0)


def test_growth_is_wrong_when_the_grown_run_ends_within_its_old_share(tmp_path):
    w = World(tmp_path)
    w.run(7, FAKE_EPOCH)
    w.tick(FAKE_EPOCH + 1, j7=1.5 * w.share)
    grow_row(w, "shadow", at=FAKE_EPOCH + 2)  # shadow: the same run, left alone
    w.tick(FAKE_EPOCH + 3, j7=1.8 * w.share)
    assert w.row().outcome is None
    w.fake.jobs[7].state = "COMPLETED"
    w.tick(FAKE_EPOCH + 4)
    row = w.row()
    assert row.outcome == "wrong" and "within its old share" in row.outcome_detail


def test_growth_with_an_evicted_job_that_never_ran_again_is_unknown(tmp_path):
    w = World(tmp_path)
    w.run(7, FAKE_EPOCH)
    w.tick(FAKE_EPOCH + 1, j7=1.5 * w.share)
    grow_row(w, "enforce", at=FAKE_EPOCH + 2)
    w.fake.jobs[7].state = "PENDING"
    w.fake.submit(job_id=8, state="CANCELLED", start_time=int(FAKE_EPOCH + 5), end_time=int(FAKE_EPOCH + 5))  # held
    w.tick(FAKE_EPOCH + 3)
    w.run(7, FAKE_EPOCH + 10, shards=4)
    w.tick(FAKE_EPOCH + 11, j7=3 * w.share)
    row = w.row()
    assert row.outcome == "unknown" and "8 ended without running again" in row.outcome_detail


def test_a_grown_run_cancelled_before_it_was_sampled_is_unknown_not_a_run_that_never_came(tmp_path):
    """Seen live: the grower ran again for 3 s and was cancelled before the agent's first
    sample of that run; the row said "did not run again"."""
    w = World(tmp_path)
    w.run(7, FAKE_EPOCH)
    w.tick(FAKE_EPOCH + 1, j7=1.5 * w.share)
    grow_row(w, "enforce", at=FAKE_EPOCH + 2, evicted=())
    w.fake.jobs[7].state = "PENDING"
    w.tick(FAKE_EPOCH + 3)
    w.fake.submit(job_id=7, state="CANCELLED", start_time=int(FAKE_EPOCH + 10), end_time=int(FAKE_EPOCH + 13))
    w.tick(FAKE_EPOCH + 14)
    row = w.row()
    assert row.outcome == "unknown" and "ended before it was sampled" in row.outcome_detail


def test_a_queued_growers_row_is_judged_against_the_share_of_its_earlier_decision(tmp_path):
    w = World(tmp_path)
    w.run(7, FAKE_EPOCH)
    w.tick(FAKE_EPOCH + 1, j7=1.5 * w.share)
    grow_row(w, "enforce", at=FAKE_EPOCH + 2, evicted=())
    w.ledger.close(w.ledger.rows()[0].id, "right", "judged before")
    w.fake.jobs[7].state = "PENDING"
    w.ledger.record("grow-preempt", 7, FAKE_EPOCH + 2, "enforce", "overtaken in the queue", FAKE_EPOCH + 5,
                    gpu="node1:0", node="node1", from_shards=0, to_shards=4, evicted=[], running=False, steps=[])
    w.run(7, FAKE_EPOCH + 10, shards=4)
    w.tick(FAKE_EPOCH + 11, j7=2.5 * w.share)
    queued = w.ledger.rows()[1]
    assert queued.outcome == "right" and f"old share of {2 * w.share / GIB:.1f}GiB" in queued.outcome_detail


def regroup_row(w: World, mode: str, *, at: float, expected_in: float) -> None:
    w.ledger.record("regroup", 5, FAKE_EPOCH, mode, "moved to free node1:0", at, head_job=20, plan="whole",
                    frees="node1:0", moves=[5], gain_s=900.0, cost_s=60.0, lost_work_s=0.0,
                    head_start_without=at + 1000, head_start_with=at + expected_in)


def test_regroup_is_right_when_the_head_starts_by_the_plans_time(tmp_path):
    w = World(tmp_path)
    w.fake.submit(job_id=20, state="PENDING", gres="gres:gpu:1", start_time=int(FAKE_EPOCH + 5000))  # Slurm's guess
    regroup_row(w, "enforce", at=FAKE_EPOCH, expected_in=30)
    w.tick(FAKE_EPOCH + 10)
    assert w.row().outcome is None
    head = w.fake.jobs[20]
    head.state, head.start_time, head.nodes = "RUNNING", int(FAKE_EPOCH + 29), "node1"
    w.tick(FAKE_EPOCH + 33)
    row = w.row()
    assert row.outcome == "right" and "started at +29s" in row.outcome_detail and "+30s" in row.outcome_detail


def test_regroup_is_wrong_when_the_head_has_not_started_by_the_plans_time(tmp_path):
    w = World(tmp_path)
    w.fake.submit(job_id=20, state="PENDING", gres="gres:gpu:1")
    regroup_row(w, "enforce", at=FAKE_EPOCH, expected_in=30)
    w.tick(FAKE_EPOCH + 59)
    assert w.row().outcome is None  # within regroup_start_slack_s (30 s) of the plan's time
    w.tick(FAKE_EPOCH + 61)
    row = w.row()
    assert row.outcome == "wrong" and "not started at +61s" in row.outcome_detail


def test_shadow_regroup_is_wrong_when_the_head_starts_anyway_and_right_when_it_keeps_waiting(tmp_path):
    w = World(tmp_path)
    w.fake.submit(job_id=20, state="PENDING", gres="gres:gpu:1")
    regroup_row(w, "shadow", at=FAKE_EPOCH, expected_in=30)
    head = w.fake.jobs[20]
    head.state, head.start_time, head.nodes = "RUNNING", int(FAKE_EPOCH + 6), "node1"
    w.tick(FAKE_EPOCH + 7)
    row = w.row()
    assert row.outcome == "wrong" and "not needed" in row.outcome_detail

    w2 = World(tmp_path / "2")
    w2.fake.submit(job_id=20, state="PENDING", gres="gres:gpu:1")
    regroup_row(w2, "shadow", at=FAKE_EPOCH, expected_in=30)
    w2.tick(FAKE_EPOCH + 40)
    assert w2.row().outcome is None
    w2.tick(FAKE_EPOCH + 61)
    row = w2.row()
    assert row.outcome == "right" and "would have started it earlier" in row.outcome_detail


def test_regroup_for_a_head_cancelled_before_it_started_is_unknown(tmp_path):
    w = World(tmp_path)
    w.fake.submit(job_id=20, state="CANCELLED", gres="gres:gpu:1", start_time=int(FAKE_EPOCH + 3))
    regroup_row(w, "enforce", at=FAKE_EPOCH, expected_in=30)
    w.tick(FAKE_EPOCH + 5)
    assert w.row().outcome == "unknown"
