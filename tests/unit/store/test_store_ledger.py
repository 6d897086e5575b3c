"""The action ledger (real SQLite): rows that persist, the report's precision and recall, pruning."""
from __future__ import annotations

import pytest

from packer.action_modes import ACTION_KINDS
from packer.action_report import summarise
from store.db import Store
from store.ledger import ActionLedger

GIB = 1024**3


def test_ledger_rows_persist_and_summarise_to_precision_and_recall(tmp_path):
    path = tmp_path / "g.db"
    store = Store(path)
    ledger = ActionLedger(store)
    a = ledger.record("restart-memory", 1, 100.0, "shadow", "will outgrow shard:1", capacity_bytes=10 * GIB)
    b = ledger.record("restart-memory", 2, 200.0, "shadow", "will outgrow shard:1")
    c = ledger.record("restart-memory", 3, 300.0, "enforce", "will outgrow shard:2")
    ledger.record("restart-memory", 4, 400.0, "shadow", "will outgrow shard:1")  # still open
    ledger.record_miss("restart-memory", 5, 500.0, "ended FAILED at 9.9GiB")
    d = ledger.record("requeue-contention", 7, 50.0, "shadow", "job 6 lost 25%", hurt=[{"job_id": 6}])
    ledger.close(a, "right", "reached 11GiB")
    ledger.close(b, "wrong", "ended COMPLETED below")
    ledger.close(c, "right", "next run reached 12GiB")
    ledger.note(d, left_at=60.0)
    ledger.close(d, "unknown", "hurt ended first")
    store.close()

    again = ActionLedger(Store(path))
    assert again.has("restart-memory", 1, 100.2) and not again.has("restart-memory", 5, 500.0)  # a miss is no decision
    assert [r.job_id for r in again.open()] == [4]
    assert again.rows("requeue-contention")[0].data == {"hurt": [{"job_id": 6}], "left_at": 60.0}
    by = {s.action: s for s in summarise(again.counts())}
    mem, con = by["restart-memory"], by["requeue-contention"]
    assert (mem.shadow, mem.enforce, mem.right, mem.wrong, mem.pending, mem.missed) == (3, 1, 2, 1, 1, 1)
    assert mem.precision == pytest.approx(2 / 3) and mem.recall == pytest.approx(2 / 3)
    assert (con.shadow, con.unknown, con.precision, con.recall) == (1, 1, None, None)


def test_a_reader_of_a_database_the_helper_never_wrote_to_sees_no_rows_and_creates_nothing(tmp_path):
    store = Store(tmp_path / "g.db")
    reader = ActionLedger(store, create=False)
    assert reader.counts() == [] and reader.rows() == []
    assert not store.db["action_ledger"].exists()
    assert [s.precision for s in summarise(reader.counts())] == [None] * len(ACTION_KINDS)


def test_prune_leaves_a_ledger_never_written_absent():
    store = Store()
    assert ActionLedger(store, create=False).prune(judged_before=1e12, open_before=1e12) == 0
    assert "action_ledger" not in store.db.table_names()  # a reader's prune creates nothing


def test_prune_keeps_open_rows_longer_than_judged_ones():
    store = Store()
    ledger = ActionLedger(store)
    judged = ledger.record("restart-memory", 1, 0.0, "enforce", "r", at=100.0)
    ledger.close(judged, "right", "ok", at=100.0)
    ledger.record("restart-memory", 2, 0.0, "enforce", "r", at=100.0)  # still open
    ledger.record("restart-memory", 3, 0.0, "enforce", "r", at=10.0)  # open, older than both cut-offs
    assert ledger.prune(judged_before=150.0, open_before=50.0) == 2
    assert [r.job_id for r in ledger.rows()] == [2]


def test_an_outcome_and_its_event_are_written_together(tmp_path):
    """A reader that sees a row judged sees its `action-outcome` event too (one transaction); a
    failed event write leaves the row open, to be judged again."""
    store = Store(tmp_path / "g.db")
    ledger = ActionLedger(store)
    row = ledger.record("requeue-contention", 7, 50.0, "shadow", "job 6 lost 25%")
    ledger.close(row, "right", "recovered", at=60.0, event=("action-outcome", "was right", 7, {"decision": row}))
    other = Store(tmp_path / "g.db")  # another connection, as the tests and `gpupack actions` read
    try:
        assert [r.outcome for r in ActionLedger(other, create=False).rows()] == ["right"]
        assert [(e.kind, e.data) for e in other.events(job_id=7)] == [("action-outcome", {"decision": row})]
    finally:
        other.close()
    open_row = ledger.record("restart-memory", 8, 70.0, "shadow", "will outgrow shard:1")
    with pytest.raises(TypeError):  # data that is not JSON: the event cannot be written
        ledger.close(open_row, "right", "x", event=("action-outcome", "was right", 8, {"bad": object()}))
    assert [r.id for r in ledger.open()] == [open_row]
    store.close()
