"""Graceful under load (issue 36): with a slow slurmctld the watcher's rounds stretch and it says
so once per episode (a log line, metrics, the view file's "watcher" entry), and no action is
taken on a view of the queue older than `[monitor] max_view_age_s`."""
from __future__ import annotations

import json
import logging

from slurm_plugin.helper.round_load import RoundLoad
from slurm_plugin.helper.view_file import publish, snapshot_to_doc
from slurm_plugin.helper.cluster_view import Snapshot
from slurm_plugin.slurm.fake import FAKE_EPOCH
from tests.unit.helper.rounds_support import make, running


def test_stretched_rounds_are_said_once_per_episode(caplog):
    load = RoundLoad(1.0)
    with caplog.at_level(logging.WARNING, logger="slurm_plugin.helper.round_load"):
        load.round_ended(0.2, 1.0)
        for _ in range(5):  # slurmctld slow: 4 s rounds, paused to a quarter duty
            load.round_ended(4.0, 16.0, "listing 3.9 s")
        assert load.stretched and load.stretched_rounds == 5
        load.round_ended(0.2, 1.0)
        load.round_ended(0.2, 1.0)
        load.round_ended(3.0, 12.0)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert "stretched: a round took 4.0 s (listing 3.9 s" in lines[0] and "every 16.0 s instead of 1.0 s" in lines[0]
    assert lines[1] == "watcher rounds back to every 1.0 s after 5 stretched rounds"
    assert load.episodes == 2 and load.stretched


def test_the_round_figures_are_metrics_and_in_the_view_file(tmp_path):
    fake, helper, samples, monitor = make(tmp_path)
    running(fake, 1, fp="aaaa")
    monitor.tick()
    monitor.pause_after(0.3)
    text = monitor.metrics_text()
    for family in ("gpupack_watcher_round_seconds", "gpupack_watcher_cycle_seconds",
                   "gpupack_watcher_slurm_query_seconds", "gpupack_watcher_queue_read_seconds",
                   "gpupack_watcher_stretched 0.0", 'gpupack_watcher_queue_reads_total{kind="json"} 1.0',
                   "gpupack_watcher_stretched_episodes_total 0.0", "gpupack_watcher_queue_records_skipped_total 0.0"):
        assert family in text, family
    path = tmp_path / "cluster-view.json"
    publish(path, Snapshot(nodes=(), pending_whole_gpu_jobs=0, taken_at=1.0), monitor.load.to_doc())
    doc = json.loads(path.read_text())
    assert doc["watcher"]["round_s"] == 0.3 and doc["watcher"]["queue_kind"] == "json"
    assert doc["watcher"]["queue_reads"] == {"json": 1} and doc["watcher"]["slurm_s"] >= 0
    assert {k: v for k, v in doc.items() if k != "watcher"} == snapshot_to_doc(
        Snapshot(nodes=(), pending_whole_gpu_jobs=0, taken_at=1.0))


def slow_listing(fake, samples, seconds: list[float]):
    """The fake Slurm whose queue listings take ``seconds[0]`` (on the monitor's clock)."""
    def executor(args, env, timeout):
        if args[0] == "squeue":
            samples.clock += seconds[0]
        return fake(args, env, timeout)
    return executor


def test_no_action_on_a_view_of_the_queue_older_than_the_limit(tmp_path, caplog):
    """Contention decided on a listing slurmctld took 40 s to give: not acted on (one event for
    the episode); once Slurm answers in time again, the same decision is carried out."""
    fake, helper, samples, monitor = make(tmp_path, max_view_age_s=30.0)
    delay = [0.0]
    monitor.runner.executor = slow_listing(fake, samples, delay)
    running(fake, 1, fp="aaaa", start=FAKE_EPOCH)
    fake.submit(job_id=5, state="PENDING", gres="gres:gpu:1", priority=4294901700)
    for t in range(10):
        samples.put(1, FAKE_EPOCH + t, throughput=20.0, started_at=FAKE_EPOCH)
        monitor.tick()
    running(fake, 2, fp="bbbb", start=FAKE_EPOCH + 10)
    delay[0] = 40.0
    t = 10.0
    with caplog.at_level(logging.WARNING):
        for _ in range(6):  # slow: each listing comes 40 s after it was asked for
            samples.put(1, FAKE_EPOCH + t, throughput=15.0, started_at=FAKE_EPOCH)
            samples.put(2, FAKE_EPOCH + t, throughput=30.0, started_at=FAKE_EPOCH + 10)
            monitor.tick()
            t = samples.clock - FAKE_EPOCH + 1
    assert fake.jobs[2].state == "RUNNING"  # nothing acted on the stale view
    (event,) = [e for e in helper.store.events() if e.kind == "stale-view"]
    assert "s old (limit 30 s" in event.detail
    assert monitor.actions.refused_old_view >= 2
    assert sum("no action on it until a fresh one" in r.getMessage() for r in caplog.records) == 1
    delay[0] = 0.0
    for _ in range(3):
        samples.put(1, FAKE_EPOCH + t, throughput=15.0, started_at=FAKE_EPOCH)
        samples.put(2, FAKE_EPOCH + t, throughput=30.0, started_at=FAKE_EPOCH + 10)
        monitor.tick()
        t += 1
    assert fake.jobs[2].state == "PENDING"  # requeued on a fresh view
    assert [e.kind for e in helper.store.events()].count("stale-view") == 1
