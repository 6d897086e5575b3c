import pytest

from store.db import SCHEMA_VERSION, RunRecord, Store, UnmeasuredRun
from tests.unit.store.old_schemas import as_schema

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


def test_a_second_record_of_a_run_is_merged_into_its_row(tmp_path):
    """The Epilog and the monitor both record the run they saw end: one row, the larger peak."""
    store = Store(tmp_path / "db.sqlite")
    assert store.record_run(RunRecord(job_id=7, fingerprint="fp", peak_mem_bytes=2 * GIB, started_at=50.0, source="observed"))
    assert not store.record_run(RunRecord(job_id=7, fingerprint="fp", peak_mem_bytes=GIB, mean_util_pct=40.0,
                                          throughput=3.0, started_at=50.0, source="monitor"))
    (run,) = store.runs("fp")
    assert (run.peak_mem_bytes, run.mean_util_pct, run.throughput) == (2 * GIB, 40.0, 3.0)
    assert store.estimate("fp").runs == 1


def test_a_requeued_jobs_next_run_is_a_run_of_its_own(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    assert store.record_run(RunRecord(job_id=7, fingerprint="fp", peak_mem_bytes=3 * GIB, started_at=50.0, ended_at=60))
    assert store.record_run(RunRecord(job_id=7, fingerprint="fp", peak_mem_bytes=5 * GIB, started_at=70.0, ended_at=90))
    assert [r.started_at for r in store.runs("fp")] == [70.0, 50.0]
    assert store.estimate("fp").runs == 2


def test_a_run_without_measured_memory_is_not_history():
    """A 0-byte row would make the estimate a 0-byte job and pack it on one share."""
    store = Store()
    with pytest.raises(UnmeasuredRun):
        store.record_run(RunRecord(job_id=1, fingerprint="fp", peak_mem_bytes=0, mean_util_pct=0.0))
    assert store.estimate("fp") is None and store.runs() == []


def test_a_schema_1_database_keeps_its_runs_and_gets_one_row_per_run(tmp_path):
    import sqlite3

    path = tmp_path / "db.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        "create table runs (id integer primary key, job_id integer, fingerprint text not null, user text, name text, "
        "peak_mem_bytes integer not null, mean_util_pct float, throughput float, ended_at float, source text);"
        "create unique index idx_runs_job_id_fingerprint on runs (job_id, fingerprint);"
        "create table avoid_pairs (fp_a text, fp_b text, reason text, created_at float, primary key (fp_a, fp_b));"
        "create table sizes (fingerprint text primary key, min_shards integer, reason text, updated_at float);"
        "create table events (id integer primary key, job_id integer, kind text, detail text, at float, data text);"
        "insert into runs (job_id, fingerprint, peak_mem_bytes, ended_at) values (7, 'fp', 1073741824, 10);"
        "pragma user_version = 1;"
    )
    conn.close()
    store = Store(path)
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert [(r.job_id, r.started_at) for r in store.runs("fp")] == [(7, 0.0)]
    assert store.record_run(RunRecord(job_id=7, fingerprint="fp", peak_mem_bytes=GIB, started_at=30.0, ended_at=40))
    assert len(store.runs("fp")) == 2


def test_bad_observations_are_refused():
    store = Store()
    with pytest.raises(ValueError):
        store.record_run(RunRecord(job_id=1, fingerprint="fp", peak_mem_bytes=-1))
    with pytest.raises(ValueError):
        store.record_run(RunRecord(job_id=1, fingerprint="fp", peak_mem_bytes=1, mean_util_pct=140))


def test_partners_of_many_fingerprints_are_those_of_each():
    store = Store()
    for a, b in (("a", "b"), ("c", "a"), ("d", "d"), ("e", "f")):
        store.pairs.avoid_pair(a, b, "contention")
    fps = ["a", "b", "d", "f", "z", "a"]
    assert store.pairs.avoided_with_each(fps) == {fp: store.pairs.avoided_with(fp) for fp in fps}
    assert store.pairs.avoided_with_each([]) == {}


def test_pairs_sizes_and_events_persist(tmp_path):
    path = tmp_path / "db.sqlite"
    store = Store(path)
    store.pairs.avoid_pair("b", "a", "contention")
    store.remember_size("a", 4, "oom-restart")
    store.log_event("decision", "packed", 12, shards=2)
    store.close()
    again = Store(path)
    assert again.pairs.must_avoid("a", "b") and again.pairs.avoided_with("a") == {"b"} and not again.pairs.must_avoid("a", "c")
    assert again.remembered_size("a") == 4 and again.remembered_size("z") is None
    (event,) = again.events()
    assert (event.job_id, event.kind, event.data) == (12, "decision", {"shards": 2})
    assert again.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert again.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_pair_speeds_keep_the_mean_of_each_ordered_pair(tmp_path):
    path = tmp_path / "db.sqlite"
    store = Store(path)
    assert store.pairs.pair_speeds() == {}
    store.pairs.record_pair_speed("a", "b", 0.6)
    row = store.pairs.record_pair_speed("a", "b", 0.8)
    assert (row.speed, row.samples) == (pytest.approx(0.7), 2)
    store.pairs.record_pair_speed("b", "a", 1.0)  # ordered: b beside a is a pair of its own
    store.close()
    speeds = Store(path).pairs.pair_speeds()
    assert set(speeds) == {("a", "b"), ("b", "a")}
    assert speeds[("a", "b")].speed == pytest.approx(0.7) and speeds[("b", "a")].samples == 1
    with pytest.raises(ValueError, match="finite ratio"):
        store.pairs.record_pair_speed("a", "b", float("nan"))


def test_a_schema_2_database_gets_the_pair_speeds_table_and_keeps_its_pairs(tmp_path):
    path = tmp_path / "db.sqlite"
    old = Store(path)
    old.pairs.avoid_pair("a", "b", "contention")
    as_schema(old, 2)
    old.close()
    store = Store(path)
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 10
    assert store.pairs.must_avoid("a", "b")
    store.pairs.record_pair_speed("a", "b", 0.5)
    assert store.pairs.pair_speeds()[("a", "b")].speed == 0.5


def test_estimates_of_many_fingerprints_are_each_ones_estimate():
    store = Store()
    for i in range(7):
        store.record_run(RunRecord(job_id=i, fingerprint="a", peak_mem_bytes=(i + 1) * GIB,
                                   mean_util_pct=10.0 * i if i % 2 else None, ended_at=float(i)))
    store.record_run(RunRecord(job_id=20, fingerprint="b", peak_mem_bytes=GIB, ended_at=1.0))
    found = store.estimates(["a", "b", "z", "a"])
    assert found == {fp: store.estimate(fp) for fp in ("a", "b")}
    assert found["a"].runs == 5 and found["a"].peak_mem_bytes == 7 * GIB and found["b"].mean_util_pct is None
    assert store.estimates([]) == {}


def test_a_schema_4_database_keeps_its_runs_as_measurements(tmp_path):
    path = tmp_path / "db.sqlite"
    old = Store(path)
    old.record_run(RunRecord(job_id=1, fingerprint="fp", peak_mem_bytes=3 * GIB, started_at=10.0))
    as_schema(old, 4)
    old.close()
    store = Store(path)
    (run,) = store.runs("fp")
    assert run.lower_bound is False and store.estimate("fp").peak_mem_bytes == 3 * GIB


def test_a_lower_bound_raises_the_estimate_but_is_never_the_measurement(tmp_path):
    """A failed run's peak is a lower bound: a workload needing 15 GiB whose failed run reached 5 GiB; and the other way
    round, a completed 4 GiB run after a run that failed at 6 GiB."""
    store = Store(tmp_path / "db.sqlite")
    store.record_run(RunRecord(job_id=1, fingerprint="fp", peak_mem_bytes=5 * GIB, lower_bound=True,
                               end_state="failed", ended_at=10))
    est = store.estimate("fp")
    assert est is not None and not est.measured and est.source == "lower-bound" and est.runs == 1
    store.record_run(RunRecord(job_id=2, fingerprint="fp", peak_mem_bytes=4 * GIB, mean_util_pct=30.0, ended_at=20))
    est = store.estimate("fp")
    assert est.measured and est.runs == 1 and est.peak_mem_bytes == 5 * GIB and est.lower_bound_bytes == 5 * GIB
    assert est.mean_util_pct == 30.0 and est.source_label == "history(1)+bound"
    store.record_run(RunRecord(job_id=3, fingerprint="fp", peak_mem_bytes=15 * GIB, ended_at=30))
    est = store.estimate("fp")
    assert est.peak_mem_bytes == 15 * GIB and est.lower_bound_bytes == 0 and est.runs == 2
    assert store.estimates(["fp"])["fp"] == est


def test_a_run_recorded_twice_is_one_row_and_one_event_a_measurement_if_either_saw_it_whole(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    event = ("history", "recorded", {"source": "monitor"})
    bound = RunRecord(job_id=7, fingerprint="fp", peak_mem_bytes=2 * GIB, started_at=50.0, lower_bound=True,
                      end_state="gaps 30s without samples", source="monitor")
    assert store.record_run(bound, event)
    assert not store.record_run(bound, event)  # the same record again: nothing new
    whole = RunRecord(job_id=7, fingerprint="fp", peak_mem_bytes=3 * GIB, started_at=50.0, end_state="completed",
                      source="sweep")
    assert not store.record_run(whole, event)
    (run,) = store.runs("fp")
    assert run.peak_mem_bytes == 3 * GIB and not run.lower_bound and run.end_state == "completed"
    assert [e.kind for e in store.events()] == ["history"]
    assert not store.record_run(bound, event)  # a later lower-bound record does not undo it
    assert not store.runs("fp")[0].lower_bound and store.run_of(7, 50.0) == store.runs("fp")[0]


def test_a_run_and_its_event_are_one_transaction(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    with pytest.raises(TypeError):  # the event cannot be written: the run is not kept either
        store.record_run(RunRecord(job_id=1, fingerprint="fp", peak_mem_bytes=GIB), ("history", "x", {"bad": object()}))
    assert store.runs("fp") == [] and store.events() == []


def test_a_later_record_of_an_old_run_does_not_make_it_recent_again(tmp_path):
    """The window of recent runs is by end: a sweep after a restart re-records old runs."""
    store = Store(tmp_path / "db.sqlite")
    store.record_run(RunRecord(job_id=1, fingerprint="fp", peak_mem_bytes=9 * GIB, started_at=5.0, ended_at=10))
    store.record_run(RunRecord(job_id=2, fingerprint="fp", peak_mem_bytes=3 * GIB, started_at=15.0, ended_at=20))
    store.record_run(RunRecord(job_id=1, fingerprint="fp", peak_mem_bytes=9 * GIB, started_at=5.0, ended_at=99))
    assert [r.job_id for r in store.runs("fp")] == [2, 1] and store.estimate("fp", window=1).peak_mem_bytes == 3 * GIB
