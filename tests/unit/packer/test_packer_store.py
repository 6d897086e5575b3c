import pytest

from packer.store import RunRecord, Store

GIB = 1024**3


def test_estimate_uses_recent_runs(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    assert store.estimate("fp") is None
    for i, (peak, util) in enumerate([(4, 10.0), (6, 30.0), (5, 50.0)]):
        store.record_run(RunRecord(job_id=i, fingerprint="fp", peak_mem_bytes=peak * GIB, mean_util_pct=util, ended_at=100 + i))
    est = store.estimate("fp", window=2)
    assert est.runs == 2 and est.peak_mem_bytes == 6 * GIB and est.mean_util_pct == 40.0
    assert store.estimate("fp").peak_mem_bytes == 6 * GIB


def test_history_is_the_estimate_and_the_remembered_size_in_one_lookup(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    assert store.history("fp") == (None, None)
    store.remember_size("fp", 3, "oom-restart")
    assert store.history("fp") == (None, 3)  # a remembered size without runs is still found
    for i, (peak, util) in enumerate([(4, 10.0), (6, None), (5, 50.0), (9, 70.0)]):
        store.record_run(RunRecord(job_id=i, fingerprint="fp", peak_mem_bytes=peak * GIB, mean_util_pct=util, ended_at=100 + i))
    store.record_run(RunRecord(job_id=9, fingerprint="other", peak_mem_bytes=99 * GIB, ended_at=200))
    for window in (1, 2, 3, 5):
        assert store.history("fp", window) == (store.estimate("fp", window), 3)
    assert store.history("fp", 3)[0].peak_mem_bytes == 9 * GIB and store.history("other")[1] is None


def test_a_second_record_of_a_job_replaces_the_first(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    store.record_run(RunRecord(job_id=7, fingerprint="fp", peak_mem_bytes=GIB))
    store.record_run(RunRecord(job_id=7, fingerprint="fp", peak_mem_bytes=2 * GIB))
    assert [r.peak_mem_bytes for r in store.runs("fp")] == [2 * GIB]


def test_bad_observations_are_refused():
    store = Store()
    with pytest.raises(ValueError):
        store.record_run(RunRecord(job_id=1, fingerprint="fp", peak_mem_bytes=-1))
    with pytest.raises(ValueError):
        store.record_run(RunRecord(job_id=1, fingerprint="fp", peak_mem_bytes=1, mean_util_pct=140))


def test_pairs_sizes_and_events_persist(tmp_path):
    path = tmp_path / "db.sqlite"
    store = Store(path)
    store.avoid_pair("b", "a", "contention")
    store.remember_size("a", 4, "oom-restart")
    store.log_event("decision", "packed", 12, shards=2)
    store.close()
    again = Store(path)
    assert again.must_avoid("a", "b") and again.avoided_with("a") == {"b"} and not again.must_avoid("a", "c")
    assert again.remembered_size("a") == 4 and again.remembered_size("z") is None
    (event,) = again.events()
    assert (event.job_id, event.kind, event.data) == (12, "decision", {"shards": 2})
    assert again.db.execute("PRAGMA user_version").fetchone()[0] == 1
    assert again.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
