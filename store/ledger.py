"""The action ledger: every run-time decision (shadow or enforced) with its measured reason,
then its outcome once known; and the misses (a run that needed the action and got none).

Rows live in the store's SQLite file (table `action_ledger`, created on first use so the
store's schema version is untouched), written with sqlite-utils; `packer.action_outcomes` judges them, `packer.action_report` sums them up.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

from packer.action_outcomes import MISSED
from store.db import Store

TABLE = "action_ledger"


@dataclass(frozen=True)
class LedgerRow:
    id: int
    action: str  # requeue-contention | restart-memory | ...
    job_id: int
    run_start: float  # the run the decision was about (the job's start on its GPU)
    mode: str  # shadow | enforce | none (a miss)
    at: float
    reason: str
    data: dict  # the measured evidence (capacity, peaks, hurt jobs and their speeds, ...)
    outcome: str | None = None  # right | wrong | unknown | missed; None while open
    outcome_detail: str | None = None
    outcome_at: float | None = None


COLUMNS = {"id": int, "action": str, "job_id": int, "run_start": float, "mode": str, "at": float,
           "reason": str, "data": str, "outcome": str, "outcome_detail": str, "outcome_at": float}


class ActionLedger:
    def __init__(self, store: Store, create: bool = True):
        """`create=False` for readers: a database the helper never wrote to reads as empty."""
        self.store = store
        if create and not self._table.exists():
            with store.db.conn:
                self._table.create(COLUMNS, pk="id", if_not_exists=True)
                self._table.create_index(["action", "outcome"], if_not_exists=True)
                self._table.create_index(["job_id", "run_start"], if_not_exists=True)

    @property
    def _table(self):
        return self.store.db[TABLE]

    def record(self, action: str, job_id: int, run_start: float, mode: str, reason: str,
               at: float | None = None, **data: object) -> int:
        row = {"action": action, "job_id": job_id, "run_start": run_start, "mode": mode,
               "at": at if at is not None else time.time(), "reason": reason, "data": json.dumps(data),
               "outcome": None, "outcome_detail": None, "outcome_at": None}
        return self._table.insert(row).last_pk

    def record_miss(self, action: str, job_id: int, run_start: float, detail: str,
                    at: float | None = None, **data: object) -> int:
        row_id = self.record(action, job_id, run_start, "none", detail, at, **data)
        self.close(row_id, MISSED, detail, at)
        return row_id

    def close(self, row_id: int, outcome: str, detail: str, at: float | None = None,
              event: tuple[str, str, int | None, dict] | None = None) -> None:
        """Judge a row; ``event`` (kind, detail, job, data) is logged in the same transaction,
        so a reader that sees the outcome sees its event too (a test that read them one after
        the other once found the outcome and not yet the event)."""
        conn = self.store.db.conn
        conn.execute("begin immediate")
        try:
            conn.execute(f"update {TABLE} set outcome = ?, outcome_detail = ?, outcome_at = ? where id = ?",
                         [outcome, detail, at if at is not None else time.time(), row_id])
            if event is not None:
                kind, text, job_id, data = event
                self.store.log_event(kind, text, job_id, **data)
            conn.execute("commit")
        except BaseException:
            conn.execute("rollback")
            raise

    def note(self, row_id: int, **data: object) -> None:
        """Add to a row's evidence (e.g. when the newcomer left its GPU)."""
        row = self._table.get(row_id)
        self._table.update(row_id, {"data": json.dumps({**json.loads(row["data"] or "{}"), **data})})

    def open(self, action: str | None = None) -> list[LedgerRow]:
        where = "outcome is null" + (" and action = ?" if action else "")
        return self._rows(where, [action] if action else [])

    def has(self, action: str, job_id: int, run_start: float) -> bool:
        """Whether a decision of `action` was taken about this run (a miss is not one)."""
        return self.store.db.execute(
            f"select 1 from {TABLE} where action = ? and job_id = ? and abs(run_start - ?) < 0.5 and mode != 'none'",
            [action, job_id, run_start],
        ).fetchone() is not None

    def rows(self, action: str | None = None, limit: int | None = None) -> list[LedgerRow]:
        return self._rows("action = ?" if action else None, [action] if action else [], limit)

    def counts(self) -> list[tuple[str, str, str | None]]:
        """(action, mode, outcome) of every row, for `packer.action_report.summarise`."""
        if not self._table.exists():
            return []
        return [tuple(r) for r in self.store.db.execute(f"select action, mode, outcome from {TABLE}").fetchall()]

    def prune(self, judged_before: float, open_before: float) -> int:
        """Delete judged rows decided before ``judged_before`` and every row decided before
        ``open_before``; rows deleted (none when the table was never created)."""
        if not self._table.exists():
            return 0
        with self.store.db.conn:
            return self.store.db.execute(f"delete from {TABLE} where (outcome is not null and at < ?) or at < ?",
                                         [judged_before, open_before]).rowcount

    def _rows(self, where: str | None, args: list, limit: int | None = None) -> list[LedgerRow]:
        if not self._table.exists():
            return []
        rows = self._table.rows_where(where, args, order_by="id", limit=limit)
        return [LedgerRow(**{**r, "data": json.loads(r["data"] or "{}")}) for r in rows]
