"""Stored memory curves (store.curves): the table (schema 4), a run's curve read back and the pruning."""
from __future__ import annotations

import math

import pytest

from packer.curves import CurvePoint, RunCurve
from store.curves import RunCurves
from store.db import SCHEMA_VERSION, RunRecord, Store
from tests.unit.store.old_schemas import as_schema

GIB = 1024**3


def curve(job_id: int, fp: str, ended_at: float, n: int = 5, started_at: float = 100.0) -> RunCurve:
    pts = tuple(CurvePoint(float(i), (i + 1) * GIB, (i + 1) * GIB) for i in range(n))
    return RunCurve(job_id=job_id, fingerprint=fp, started_at=started_at, ended_at=ended_at, end_state="COMPLETED",
                    node="node1", gpu_index=0, isolation="shard:2", shards=2, capacity_bytes=20.0 * GIB,
                    capacity_label="shard:2", samples=n, points=pts)


def test_a_stored_curve_reads_back_as_it_was(tmp_path):
    curves = RunCurves(Store(tmp_path / "db.sqlite"))
    c = curve(7, "fp", 1000.0)
    curves.save(c)
    again = RunCurves(Store(tmp_path / "db.sqlite")).of_job(7)
    assert again == c and again.peak_bytes == 5 * GIB and again.duration_s == 4.0
    assert "5 points of 5 samples, peak 5.00 GiB over 4 s, completed" == again.summary()


def test_a_requeued_job_shows_its_latest_runs_curve():
    curves = RunCurves(Store())
    curves.save(curve(7, "fp", 1000.0, n=3, started_at=100.0))
    curves.save(curve(7, "fp", 2000.0, n=4, started_at=1500.0))
    assert curves.of_job(7).started_at == 1500.0
    assert curves.of_job(8) is None


def test_only_the_newest_curves_of_each_fingerprint_are_kept():
    curves = RunCurves(Store())
    for i in range(5):
        assert curves.save(curve(i, "a", 1000.0 + i), keep=3) == (1 if i >= 3 else 0)
    curves.save(curve(99, "b", 500.0), keep=3)  # another workload: not pruned by a's
    assert [c.job_id for c in curves.of_fingerprint("a")] == [4, 3, 2]
    assert [c.job_id for c in curves.of_fingerprint("b")] == [99]
    assert curves.save(curve(100, "a", 2000.0), keep=0) == 0 and curves.of_job(100) is None  # 0 keeps none
    with pytest.raises(ValueError, match="0 or more"):
        curves.save(curve(101, "a", 2000.0), keep=-1)


def test_a_schema_3_database_gets_the_curves_table_and_keeps_its_rows(tmp_path):
    path = tmp_path / "db.sqlite"
    old = Store(path)
    old.record_run(RunRecord(job_id=1, fingerprint="fp", peak_mem_bytes=3 * GIB, mean_util_pct=40.0, started_at=10.0))
    old.pairs.avoid_pair("a", "b", "contention")
    old.pairs.record_pair_speed("a", "b", 0.8)
    old.log_event("history", "recorded", 1)
    as_schema(old, 3)
    old.close()
    store = Store(path)
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 10
    (run,) = store.runs("fp")
    assert (run.job_id, run.peak_mem_bytes, run.started_at) == (1, 3 * GIB, 10.0)
    assert store.pairs.must_avoid("a", "b") and math.isclose(store.pairs.pair_speeds()[("a", "b")].speed, 0.8)
    assert [e.kind for e in store.events()] == ["history"]
    RunCurves(store).save(curve(1, "fp", 1000.0, started_at=10.0))
    assert RunCurves(store).of_job(1).started_at == run.started_at  # keyed like the run
