"""The retention of the store's own tables (events, runs, pair speeds, avoided pairs,
remembered sizes): what `[retention]` no longer keeps is deleted here. The other tables'
owners prune their own (`RunCurves`, `ActionLedger`, `SliceMirror`)."""
from __future__ import annotations

from store.db import Store


class StoreRetention:
    """Deletes the rows of the store's own tables that are past their time."""

    def __init__(self, store: Store):
        self.store = store

    def prune(self, *, events_before: float, events_max_rows: int, runs_before: float, runs_per_fingerprint: int,
              pairs_before: float, sizes_before: float) -> dict[str, int]:
        """Delete events older than ``events_before`` or beyond the newest ``events_max_rows``,
        runs ended before ``runs_before`` or beyond the newest ``runs_per_fingerprint`` of their
        workload, pair speeds and avoided pairs not renewed since ``pairs_before``, remembered
        sizes not renewed since ``sizes_before``; rows deleted per table."""
        statements: list[tuple[str, str, list]] = [
            ("events", "delete from events where at < ?", [events_before]),
            ("events", "delete from events where id <= (select id from events order by id desc limit 1 offset ?)",
             [events_max_rows]),
            ("runs", "delete from runs where ended_at < ?", [runs_before]),
            ("runs", "delete from runs where rowid in (select rowid from (select rowid, row_number() over "
                     "(partition by fingerprint order by ended_at desc) as n from runs) where n > ?)",
             [runs_per_fingerprint]),
            ("pair_speeds", "delete from pair_speeds where updated_at < ?", [pairs_before]),
            ("avoid_pairs", "delete from avoid_pairs where created_at < ?", [pairs_before]),
            ("sizes", "delete from sizes where updated_at < ?", [sizes_before]),
        ]
        deleted: dict[str, int] = {}
        with self.store.db.conn:
            for table, sql, args in statements:
                deleted[table] = deleted.get(table, 0) + self.store.db.execute(sql, args).rowcount
        return deleted
