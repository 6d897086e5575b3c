"""Every table and per-job map has a retention rule ([retention] of gpupack.toml)."""
from __future__ import annotations

import time

from store.db import RunRecord, Store
from slurm_plugin.config.bounds import RetentionSettings
from slurm_plugin.helper.retention import DAY_S, JobMemory, prune_store
from slurm_plugin.slurm.fake import FAKE_EPOCH

from tests.unit.helper import rounds_support
from tests.unit.helper.rounds_support import GIB


def _run(job_id, fp, ended_at):
    return RunRecord(job_id=job_id, fingerprint=fp, user="u", name="n", peak_mem_bytes=GIB, mean_util_pct=10.0,
                     throughput=None, ended_at=ended_at, started_at=ended_at - 10)


def test_the_store_keeps_what_the_rules_say(tmp_path):
    store = Store(tmp_path / "db")
    now = time.time()
    for i in range(12):
        store.record_run(_run(i, "fp", now - i))
    store.record_run(_run(100, "old", now - 400 * DAY_S))
    for i in range(1200):
        store.log_event("decision", f"e{i}")
    store.pairs.avoid_pair("a", "b", "test")
    store.db.execute("update avoid_pairs set created_at = ?", [now - 400 * DAY_S])
    store.db.execute("update events set at = ? where id <= 10", [now - 100 * DAY_S])
    rules = RetentionSettings(runs_per_fingerprint=5, events_max_rows=1000)
    deleted = prune_store(store, rules, now)
    assert deleted == {"runs": 7 + 1, "events": 10 + 190, "avoid_pairs": 1}
    assert [r.job_id for r in store.runs("fp")] == [0, 1, 2, 3, 4]  # the newest five
    assert store.db["events"].count == 1000 and not store.pairs.must_avoid("a", "b")
    assert prune_store(store, rules, now) == {}  # nothing more to do


def test_a_job_slurm_no_longer_lists_is_forgotten_by_every_map():
    heading, reported = {7: 1, 8: 1}, {(7, 1.0), (8, 2.0)}
    memory = JobMemory(lambda: [heading, reported], forget_after_s=60)
    memory.round([7, 8], now=0.0)
    memory.round([8], now=30.0)
    assert 7 in heading  # not yet
    memory.round([8], now=61.0)
    assert heading == {8: 1} and reported == {(8, 2.0)} and set(memory.last_listed) == {8}


def test_a_forgotten_jobs_lift_leaves_the_store_too():
    """The monitor's lifts are a mapping kept in the store (`store.lifts`), not a dict."""
    from packer.preemption import Lift
    from store.lifts import HeadLifts

    store = Store()
    heading = HeadLifts(lambda: store)
    heading[7], heading[8] = Lift(0, -5, 1), Lift(0, -6, 1)
    memory = JobMemory(lambda: [heading], forget_after_s=60)
    memory.round([7, 8], now=0.0)
    memory.round([8], now=61.0)
    assert dict(heading) == {8: Lift(0, -6, 1)} and dict(HeadLifts(lambda: store)) == {8: Lift(0, -6, 1)}


def test_the_watchers_maps_stay_bounded_over_many_judged_runs(tmp_path):
    """`reported` (one entry per judged run) grew for good; now it forgets ended jobs."""
    fake, helper, samples, monitor = rounds_support.make(tmp_path, fixed_clock=False)
    monitor.retention_watch.memory.forget_after_s = 5
    for job_id in range(1, 200):
        rounds_support.running(fake, job_id, fp=f"f{job_id % 7}", start=FAKE_EPOCH + job_id * 10)
        samples.put(job_id, FAKE_EPOCH + job_id * 10 + 1, started_at=FAKE_EPOCH + job_id * 10)
        monitor.actions.first_report(job_id, FAKE_EPOCH + job_id * 10)
        monitor.tick()
        fake.jobs[job_id].state = "COMPLETED"
        del fake.jobs[job_id]
        samples.now.pop(job_id, None)
    assert len(monitor.state.reported) <= 2 and len(monitor.retention_watch.memory.last_listed) <= 2
