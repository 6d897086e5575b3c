"""The controller's copy of the agents' slice journals: the store's `slice_journal` table
(schema 6), owned by `SliceMirror`; `slurm_plugin.helper.journal_mirror` fills it.

A row is one (node, slice, job, run). It is *held* while the agent's journal lists it, and
gets ``released_at`` the first time the journal no longer does (unless the agent is unsure of
that slice: then the row stays held, it is what the agent may be given back).
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from store.db import Store


@dataclass(frozen=True)
class HeldSlice:
    """What a journal says holds: slice ``uuid`` by run ``run`` of job ``job_id``."""

    uuid: str
    job_id: int
    run: float
    assignment: dict  # the agent's whole record of the job's isolation

    @classmethod
    def from_dict(cls, doc: dict) -> "HeldSlice":
        """One entry of an agent's ``journal`` answer (a KeyError, TypeError or ValueError: malformed)."""
        if not isinstance(doc.get("assignment"), dict):
            raise TypeError("assignment must be an object")
        return cls(str(doc["uuid"]), int(doc["job"]), float(doc["run"]), doc["assignment"])


class SliceMirror:
    """The `slice_journal` table of one `Store`."""

    def __init__(self, store: Store):
        self.conn = store.db.conn

    def mirror(self, node: str, held: Iterable[HeldSlice], now: float, keep: Iterable[str] = ()) -> tuple[int, int]:
        """What ``node``'s journal holds now: new rows added, rows no longer listed released
        (those of the slices in ``keep``, which the agent is unsure of, stay held). Returns
        (rows added, rows released)."""
        held = list(held)
        keep = set(keep)
        conn = self.conn
        conn.execute("begin immediate")
        try:
            added = 0
            for h in held:
                cur = conn.execute(
                    "update slice_journal set last_seen = ?, released_at = null, assignment = ? "
                    "where node = ? and uuid = ? and job_id = ? and run = ?",
                    [now, json.dumps(h.assignment, sort_keys=True), node, h.uuid, h.job_id, h.run])
                if cur.rowcount == 0:
                    conn.execute("insert into slice_journal (node, uuid, job_id, run, assignment, first_seen, "
                                 "last_seen) values (?, ?, ?, ?, ?, ?, ?)",
                                 [node, h.uuid, h.job_id, h.run, json.dumps(h.assignment, sort_keys=True), now, now])
                    added += 1
            listed = {(h.uuid, h.job_id, h.run) for h in held}
            released = 0
            for uuid, job_id, run in conn.execute(
                    "select uuid, job_id, run from slice_journal where node = ? and released_at is null",
                    [node]).fetchall():
                if (uuid, job_id, run) not in listed and uuid not in keep:
                    conn.execute("update slice_journal set released_at = ? where node = ? and uuid = ? and "
                                 "job_id = ? and run = ?", [now, node, uuid, job_id, run])
                    released += 1
            conn.execute("commit")
        except BaseException:
            conn.execute("rollback")
            raise
        return added, released

    def held(self, node: str, uuids: Iterable[str] | None = None) -> list[HeldSlice]:
        """The rows of ``node`` still held (of those slices only, when ``uuids`` is given),
        the newest run of each slice first."""
        rows = self.conn.execute(
            "select uuid, job_id, run, assignment from slice_journal where node = ? and released_at is null "
            "order by uuid, run desc", [node]).fetchall()
        wanted = None if uuids is None else set(uuids)
        return [HeldSlice(u, j, r, json.loads(a)) for u, j, r, a in rows if wanted is None or u in wanted]

    def prune(self, before: float) -> int:
        """Delete released rows, and held rows of a node not heard from, last seen before
        ``before``; rows deleted."""
        with self.conn:
            return self.conn.execute("delete from slice_journal where coalesce(released_at, last_seen) < ?",
                                     [before]).rowcount
