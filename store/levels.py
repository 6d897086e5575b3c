"""The store's tables for history that survives real edits (``packer.workload_identity``):

- ``workload_keys``: for each exact fingerprint with a recorded run, its user and the keys of
  its looser levels (``variant_key``, ``command_key``), so a run recorded under one script is
  found from another that differs in values only (or runs the same commands);
- ``level_guesses``: per (level, key), how often a job sized from that level was moved by
  restart-oom or a memory-forecast restart (``wrong``) and how often it completed as a
  measurement (``right``): what demotes a level for a workload (``packer.history_levels``).

Growth is bounded per user (a hostile user can submit any number of variants): each table
keeps a user's newest ``per_user`` rows; the older ones are evicted and counted (the
``history-keys-evicted`` event, and what :meth:`LevelStore.remember_keys` returns). The
tables are created by the store's migration 9 (``store.db``).
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable

from packer.history_levels import LevelRecord
from packer.workload_identity import COMMAND, EXACT, VARIANT, WorkloadKeys
from store.db import Store, _estimate

log = logging.getLogger(__name__)

DEFAULT_PER_USER = 2000
EVICTED_EVENT = "history-keys-evicted"
_KEY_COLUMN = {VARIANT: "variant_key", COMMAND: "command_key"}


class LevelStore:
    """Reads and writes the two tables on one store (the helper is their one writer)."""

    def __init__(self, store: Store, per_user: int = DEFAULT_PER_USER):
        if per_user < 1:
            raise ValueError(f"per_user must be at least 1, got {per_user}")
        self.store = store
        self.per_user = per_user

    @property
    def _conn(self):
        return self.store.db.conn

    # -- keys -------------------------------------------------------------------------
    def keys_of(self, fingerprint: str) -> WorkloadKeys | None:
        row = self._conn.execute("select variant_key, command_key from workload_keys where fingerprint = ?",
                                 [fingerprint]).fetchone()
        return None if row is None else WorkloadKeys(fingerprint, row[0], row[1])

    def remember_keys(self, keys: WorkloadKeys, user: str, now: float | None = None) -> int:
        """Note ``keys`` (seen now); returns how many of the user's older rows were evicted."""
        now = time.time() if now is None else now
        conn = self._conn
        conn.execute("begin immediate")
        try:
            conn.execute("insert into workload_keys (fingerprint, user, variant_key, command_key, seen_at) "
                         "values (?, ?, ?, ?, ?) on conflict (fingerprint) do update set seen_at = excluded.seen_at, "
                         "variant_key = excluded.variant_key, command_key = excluded.command_key",
                         [keys.exact, user, keys.variant, keys.command, now])
            evicted = self._evict(conn, "workload_keys", user)
            if evicted:
                conn.execute("insert into events (job_id, kind, detail, at, data) values (null, ?, ?, ?, ?)",
                             [EVICTED_EVENT, f"user {user}: {evicted} older workload keys evicted "
                              f"(more than {self.per_user} workloads)",
                              now, json.dumps({"user": user, "table": "workload_keys", "evicted": evicted})])
            conn.execute("commit")
        except BaseException:
            conn.execute("rollback")
            raise
        if evicted:
            log.warning("user %s: %d older workload keys evicted (more than %d workloads)", user, evicted,
                        self.per_user)
        return evicted

    def _evict(self, conn, table: str, user: str) -> int:
        order = "seen_at" if table == "workload_keys" else "updated_at"
        return conn.execute(
            f"delete from {table} where rowid in (select rowid from {table} where user = ? "
            f"order by {order} desc limit -1 offset ?)", [user, self.per_user]).rowcount

    # -- history at the looser levels ----------------------------------------------------
    def records(self, keys: WorkloadKeys, levels: Iterable[str], window: int, since: float = 0.0) -> list[LevelRecord]:
        """The looser ``levels``' records of ``keys``: the estimate of the last ``window``
        measured runs of any workload sharing that level's key (ended after ``since``), and
        the level's guesses for that key. Levels the script lacks are left out."""
        out = []
        for level in levels:
            if level == EXACT:
                continue
            key = keys.key(level)
            if key is None:
                continue
            rows = self._conn.execute(
                f"select peak_mem_bytes, mean_util_pct from runs where fingerprint in (select fingerprint from "
                f"workload_keys where {_KEY_COLUMN[level]} = ?1) and lower_bound = 0 and ended_at >= ?3 "
                "order by ended_at desc limit ?2", [key, int(window), float(since)]).fetchall()
            guess = self._conn.execute("select wrong, right from level_guesses where level = ? and key = ?",
                                       [level, key]).fetchone()
            wrong, right = guess if guess is not None else (0, 0)
            out.append(LevelRecord(level, key, _estimate([tuple(r) for r in rows], []), wrong, right))
        return out

    # -- guesses --------------------------------------------------------------------------
    def count_guess(self, level: str, key: str, user: str, wrong: bool, now: float | None = None) -> tuple[int, int]:
        """One more wrong (or right) guess of ``level`` for ``key``; (wrong, right) now."""
        now = time.time() if now is None else now
        column = "wrong" if wrong else "right"
        conn = self._conn
        conn.execute("begin immediate")
        try:
            conn.execute(f"insert into level_guesses (level, key, user, wrong, right, updated_at) values "
                         f"(?1, ?2, ?3, ?4, ?5, ?6) on conflict (level, key) do update set "
                         f"{column} = {column} + 1, updated_at = ?6",
                         [level, key, user, int(wrong), int(not wrong), now])
            self._evict(conn, "level_guesses", user)
            row = conn.execute("select wrong, right from level_guesses where level = ? and key = ?",
                               [level, key]).fetchone()
            conn.execute("commit")
        except BaseException:
            conn.execute("rollback")
            raise
        return (row[0], row[1]) if row is not None else (0, 0)

    def guesses(self) -> list[dict]:
        """Every level's counts, newest first (for a report)."""
        return [dict(zip(("level", "key", "user", "wrong", "right", "updated_at"), r)) for r in self._conn.execute(
            "select level, key, user, wrong, right, updated_at from level_guesses order by updated_at desc")]
