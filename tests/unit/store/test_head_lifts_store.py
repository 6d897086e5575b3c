"""Head-of-queue lifts kept in the store (`store.lifts`, schema 7): what the watcher reads
again when it starts."""
from __future__ import annotations

import pytest

from packer.preemption import Lift
from store.db import SCHEMA_VERSION, Store
from store.lifts import HeadLifts
from tests.unit.store.old_schemas import as_schema


def test_lifts_are_written_through_and_read_again_by_a_new_map(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    lifts = HeadLifts(lambda: store)
    lifts[7] = Lift(50, -400, 1)
    lifts[9] = Lift(0, -10)
    lifts[7] = Lift(50, -800, 1)  # raised further: the row follows
    again = HeadLifts(lambda: Store(tmp_path / "db.sqlite"))
    assert dict(again) == {7: Lift(50, -800, 1), 9: Lift(0, -10, None)}
    del again[9]
    assert again.pop(7) == Lift(50, -800, 1)
    assert not again and not dict(HeadLifts(lambda: store))
    with pytest.raises(KeyError):
        del again[7]


def test_a_write_goes_to_the_store_of_the_moment(tmp_path):
    first, second = Store(tmp_path / "a.sqlite"), Store(tmp_path / "b.sqlite")
    current = [first]
    lifts = HeadLifts(lambda: current[0])
    lifts[7] = Lift(0, -5, 2)
    current[0] = second
    lifts[8] = Lift(0, -6, 1)
    assert dict(HeadLifts(lambda: first)) == {7: Lift(0, -5, 2)}
    assert dict(HeadLifts(lambda: second)) == {8: Lift(0, -6, 1)}


def test_a_schema_6_database_gets_the_lifts_table(tmp_path):
    path = tmp_path / "db.sqlite"
    old = Store(path)
    as_schema(old, 6)
    old.close()
    store = Store(path)
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 10
    HeadLifts(lambda: store)[3] = Lift(0, -1, 1)
    assert dict(HeadLifts(lambda: store)) == {3: Lift(0, -1, 1)}
