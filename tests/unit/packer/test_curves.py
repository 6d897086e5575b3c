"""Stored memory curves: the downsampling rule, the table (schema 4) and its pruning."""
from __future__ import annotations

import math

import pytest

from store.curves import RunCurves
from packer.curves import MAX_POINTS, CurvePoint, RunCurve, downsample, mig_profile_of, partition_capacity
from store.db import SCHEMA_VERSION, RunRecord, Store

GIB = 1024**3


def noisy(n: int, spike_at: int | None = None) -> list[CurvePoint]:
    """A curve that rises and wobbles; a short spike at `spike_at` is its peak."""
    out, peak = [], 0
    for i in range(n):
        mem = int(2 * GIB + i * 1_000_000 + (300_000_000 if i % 7 == 0 else 0))
        if i == spike_at:
            mem = 9 * GIB
        peak = max(peak, mem)
        out.append(CurvePoint(float(i) * 0.5, mem, peak))
    return out


def test_a_short_curve_is_kept_whole():
    pts = noisy(150)
    assert downsample(pts) == tuple(pts)


@pytest.mark.parametrize("n, spike", [(201, 100), (600, 1), (600, 598), (1000, 437), (5000, None)])
def test_downsampling_keeps_the_ends_and_the_peak_within_the_bound(n, spike):
    pts = noisy(n, spike)
    kept = downsample(pts)
    assert len(kept) <= MAX_POINTS
    assert kept[0] == pts[0] and kept[-1] == pts[-1]
    top = max(p.mem_bytes for p in pts)
    assert max(p.mem_bytes for p in kept) == top
    assert max(p.peak_bytes for p in kept) == max(p.peak_bytes for p in pts)
    assert [p.t for p in kept] == sorted(p.t for p in kept)  # in order, no duplicates
    assert len({p.t for p in kept}) == len(kept)


def test_downsampling_keeps_each_stretchs_highest_point_not_a_mean():
    # a flat 1 GiB curve with a 1-sample excursion to 3 GiB every 50 samples
    pts = [CurvePoint(float(i), 3 * GIB if i % 50 == 25 else GIB, 3 * GIB if i >= 25 else GIB) for i in range(2000)]
    kept = downsample(pts, limit=60)
    assert len(kept) <= 60
    assert sum(1 for p in kept if p.mem_bytes == 3 * GIB) == 40  # every excursion survives
    with pytest.raises(ValueError, match="at least 4"):
        downsample(pts, limit=3)


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
    old.avoid_pair("a", "b", "contention")
    old.record_pair_speed("a", "b", 0.8)
    old.log_event("history", "recorded", 1)
    old.db.execute("drop table run_curves")
    old.db.execute("drop table slice_journal")  # schema 6's
    old.db.execute("drop table head_lifts")  # schema 7's
    for undo in ("drop index idx_runs_fp_bound_ended", "alter table runs drop column lower_bound",
                 "alter table runs drop column end_state"):  # schema 5's
        old.db.execute(undo)
    old.db.execute("pragma user_version = 3")
    old.close()
    store = Store(path)
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
    (run,) = store.runs("fp")
    assert (run.job_id, run.peak_mem_bytes, run.started_at) == (1, 3 * GIB, 10.0)
    assert store.must_avoid("a", "b") and math.isclose(store.pair_speeds()[("a", "b")].speed, 0.8)
    assert [e.kind for e in store.events()] == ["history"]
    RunCurves(store).save(curve(1, "fp", 1000.0, started_at=10.0))
    assert RunCurves(store).of_job(1).started_at == run.started_at  # keyed like the run


def test_a_partition_is_the_mig_slice_else_the_shares_else_none():
    mib = {"1g.10gb": 9984}.get
    assert mig_profile_of("mig:1g.10gb@6") == "1g.10gb" and mig_profile_of("mps:30") is None
    assert partition_capacity("mig:1g.10gb@6", 1, 10.0, mib) == (9984 * 1024**2, "MIG 1g.10gb")
    assert partition_capacity("mig:9g.99gb@0", 2, 10.0, mib) == (20.0, "shard:2")  # a profile not known
    assert partition_capacity("mps:30", 3, 10.0, mib) == (30.0, "shard:3")
    assert partition_capacity(None, None, 10.0, mib) == (None, "")
