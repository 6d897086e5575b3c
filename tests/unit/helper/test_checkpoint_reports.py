"""The checkpoints jobs report, as the regroup view reads them from the agents' samples."""
from __future__ import annotations

from packer.samples import JobSample
from slurm_plugin.helper.monitor_settings import MonitorSettings
from slurm_plugin.helper.watches.checkpoint_reports import CheckpointReport, CheckpointReports
from slurm_plugin.helper.watches.regroup_view import movability
from slurm_plugin.slurm.model import Job


def sample(job, at, node="node1", **more):
    return JobSample(job_id=job, node=node, gpu_index=0, at=at, mem_bytes=0, peak_mem_bytes=0, **more)


def test_the_newest_report_of_the_present_run_counts():
    r = CheckpointReports()
    assert r.of(1) is None
    r.update([sample(1, 100, checkpoint_every_s=60.0),
              sample(1, 110, last_checkpoint_at=109.0, checkpoint_every_s=60.0)])
    assert r.of(1, run_start=50) == CheckpointReport(109.0, 60.0)
    r.update([sample(1, 105, last_checkpoint_at=104.0)])  # older than what it knows: ignored
    assert r.of(1, run_start=50).last_at == 109.0
    assert r.of(1, run_start=200) is None  # a later run: the earlier run's reports do not count
    r.update([sample(2, 120)])
    assert r.of(2) is None  # a job that says nothing about checkpoints
    r.keep_only({2})
    assert r.of(1) is None


def test_a_job_on_two_nodes_reports_through_one_agent():
    r = CheckpointReports()
    r.update([sample(3, 100, node="node1", last_checkpoint_at=99.0, checkpoint_every_s=30.0),
              sample(3, 101, node="node2")])  # the other node's agent heard nothing
    assert r.of(3, run_start=10) == CheckpointReport(99.0, 30.0)


def test_movability_takes_the_reports():
    settings = MonitorSettings()
    job = Job(job_id=1, requeue=True)
    assert not movability(job, None, settings).movable
    move = movability(job, None, settings, CheckpointReport(100.0, 60.0))
    assert move.movable and move.last_checkpoint_at == 100.0 and move.checkpoint_every_s == 60.0
    assert move.timing(now=130.0, started_at=0.0) == (30.0, 0.0)  # the next boundary, nothing lost
    # a last checkpoint but no period: not movable by reports (nothing to wait for)
    assert not movability(job, None, settings, CheckpointReport(100.0, None)).movable
    assert not movability(Job(job_id=1, requeue=False), None, settings, CheckpointReport(100.0, 60.0)).movable
