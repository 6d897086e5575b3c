"""History keeps what a run needed beside NVML's figure, and runs that never touched their GPU."""
from __future__ import annotations

import pytest

from store.db import SCHEMA_VERSION, RunRecord, Store, UnmeasuredRun
from tests.unit.store.old_schemas import as_schema

GIB = 1024**3


def run(job_id, peak, fp="fp", **more) -> RunRecord:
    return RunRecord(job_id=job_id, fingerprint=fp, peak_mem_bytes=int(peak), mean_util_pct=20.0,
                     ended_at=1000.0 + job_id, **more)


def test_sizing_uses_the_need_where_a_run_has_one_and_nvml_elsewhere():
    store = Store()
    store.record_run(run(1, 34 * GIB, need_bytes=int(4.5 * GIB)))
    assert store.estimate("fp").peak_mem_bytes == int(4.5 * GIB)
    assert store.runs("fp")[0].peak_mem_bytes == 34 * GIB  # NVML's figure kept beside it
    store.record_run(run(2, 6 * GIB))  # a run without a need: its NVML peak
    assert store.estimate("fp").peak_mem_bytes == 6 * GIB
    assert store.estimates(["fp"])["fp"].peak_mem_bytes == 6 * GIB


def test_a_need_above_what_nvml_saw_is_refused():
    with pytest.raises(ValueError, match="need"):
        Store().record_run(run(1, 4 * GIB, need_bytes=5 * GIB))


def test_a_later_record_of_the_run_brings_its_need():
    store = Store()
    assert store.record_run(run(1, 30 * GIB))
    assert not store.record_run(run(1, 34 * GIB, need_bytes=4 * GIB))
    (merged,) = store.runs("fp")
    assert (merged.peak_mem_bytes, merged.need_bytes) == (34 * GIB, 4 * GIB)
    assert not store.record_run(run(1, 34 * GIB))  # a record without one keeps it
    assert store.runs("fp")[0].need_bytes == 4 * GIB


def test_an_untouched_run_is_a_zero_byte_measurement_and_nothing_else_of_zero_is():
    store = Store()
    with pytest.raises(UnmeasuredRun):
        store.record_run(run(1, 0))
    with pytest.raises(UnmeasuredRun):
        store.record_run(run(1, 0, untouched=True, lower_bound=True))
    with pytest.raises(ValueError, match="untouched"):
        store.record_run(run(1, GIB, untouched=True))
    assert store.record_run(RunRecord(job_id=2, fingerprint="fp", peak_mem_bytes=0, mean_util_pct=0.0,
                                      untouched=True, end_state="completed untouched"))
    est = store.estimate("fp")
    assert (est.peak_mem_bytes, est.mean_util_pct, est.runs, est.measured) == (0, 0.0, 1, True)
    assert store.runs("fp")[0].untouched


def test_a_run_seen_untouched_by_one_path_and_using_memory_by_another_used_memory():
    store = Store()
    store.record_run(RunRecord(job_id=3, fingerprint="fp", peak_mem_bytes=0, mean_util_pct=0.0, untouched=True))
    store.record_run(run(3, 2 * GIB))
    (merged,) = store.runs("fp")
    assert (merged.untouched, merged.peak_mem_bytes) == (False, 2 * GIB)


def test_a_schema_7_database_gets_the_columns_and_keeps_its_runs(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    store.record_run(run(1, 3 * GIB))
    as_schema(store, 7)
    store.close()
    again = Store(tmp_path / "db.sqlite")
    assert again.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 10
    (old,) = again.runs("fp")
    assert (old.peak_mem_bytes, old.need_bytes, old.untouched) == (3 * GIB, None, False)
