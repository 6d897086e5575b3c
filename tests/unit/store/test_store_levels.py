"""The looser levels' keys and guesses in SQLite: history found across variants, guesses
counted per level and key, growth bounded per user (evictions counted)."""
import pytest

from store.db import SCHEMA_VERSION, RunRecord, Store
from store.levels import EVICTED_EVENT, LevelStore
from packer.workload_identity import WorkloadKeys
from tests.unit.store.old_schemas import as_schema

GIB = 1024**3


def run(job, fp, gib, util=40.0, ended=100.0, bound=False):
    return RunRecord(job_id=job, fingerprint=fp, peak_mem_bytes=int(gib * GIB), mean_util_pct=util, ended_at=ended,
                     started_at=ended - 10, lower_bound=bound)


def test_a_run_of_one_variant_is_history_for_another():
    store = Store()
    levels = LevelStore(store)
    levels.remember_keys(WorkloadKeys("fp-lr1", "v", "c"), "ann")
    store.record_run(run(1, "fp-lr1", 6))
    store.record_run(run(2, "fp-lr1", 7, ended=200.0, bound=True))  # a lower bound of another variant: not taken
    other = WorkloadKeys("fp-lr2", "v", "c")
    (variant, command) = levels.records(other, ("exact", "variant", "command"), window=5)
    assert variant.level == "variant" and variant.estimate.peak_mem_bytes == 6 * GIB and variant.estimate.runs == 1
    assert command.estimate.peak_mem_bytes == 6 * GIB
    assert levels.records(WorkloadKeys("x", "v2", None), ("variant", "command"), window=5)[0].estimate is None
    assert levels.records(other, ("variant",), window=5, since=150.0)[0].estimate is None  # too old


def test_guesses_are_counted_per_level_and_key():
    store = Store()
    levels = LevelStore(store)
    assert levels.count_guess("variant", "v", "ann", wrong=True) == (1, 0)
    assert levels.count_guess("variant", "v", "ann", wrong=False) == (1, 1)
    assert levels.count_guess("variant", "v", "ann", wrong=True) == (2, 1)
    assert levels.count_guess("command", "v", "ann", wrong=True) == (1, 0)
    (rec,) = levels.records(WorkloadKeys("e", "v", None), ("variant",), window=5)
    assert (rec.wrong, rec.right) == (2, 1)


def test_a_hostile_users_variants_are_bounded_and_the_evictions_counted():
    store = Store()
    levels = LevelStore(store, per_user=3)
    evicted = [levels.remember_keys(WorkloadKeys(f"fp{i}", f"v{i}", None), "mallory", now=float(i)) for i in range(5)]
    levels.remember_keys(WorkloadKeys("fp-ann", "va", None), "ann", now=0.0)
    assert evicted == [0, 0, 0, 1, 1]
    assert levels.keys_of("fp0") is None and levels.keys_of("fp4") == WorkloadKeys("fp4", "v4", None)
    assert levels.keys_of("fp-ann") is not None  # another user's rows are never evicted for mallory's
    assert [e.kind for e in store.events()].count(EVICTED_EVENT) == 2
    for i in range(5):
        levels.count_guess("variant", f"v{i}", "mallory", wrong=True, now=float(i))
    assert store.counts("level_guesses")["level_guesses"] == 3
    with pytest.raises(ValueError):
        LevelStore(store, per_user=0)


def test_a_schema_8_database_gets_the_level_tables(tmp_path):
    path = tmp_path / "db.sqlite"
    old = Store(path)
    old.record_run(run(1, "fp", 3))
    as_schema(old, 8)
    old.close()
    store = Store(path)
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    LevelStore(store).remember_keys(WorkloadKeys("fp", "v", "c"), "ann")
    assert store.runs("fp")[0].peak_mem_bytes == 3 * GIB
