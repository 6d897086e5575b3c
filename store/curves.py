"""Finished runs' memory curves in the packer's SQLite store (`run_curves`, schema 4).

Bounded: only the newest `keep` curves of each fingerprint stay; saving one prunes the
older ones of its fingerprint in the same transaction.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from packer.curves import CurvePoint, RunCurve
from store.db import Store

log = logging.getLogger(__name__)

DEFAULT_KEEP = 20  # curves kept per fingerprint ([monitor] curves_per_fingerprint)
COLUMNS = ("job_id", "fingerprint", "started_at", "ended_at", "end_state", "node", "gpu_index", "isolation",
           "shards", "capacity_bytes", "capacity_label", "samples", "points")


def _row(curve: RunCurve) -> dict:
    row = {c: getattr(curve, c) for c in COLUMNS if c != "points"}
    row["points"] = json.dumps([[round(p.t, 2), int(p.mem_bytes), int(p.peak_bytes)] for p in curve.points],
                               separators=(",", ":"))
    return row


def _curve(row: Iterable) -> RunCurve:
    values = dict(zip(COLUMNS, row))
    points = tuple(CurvePoint(float(t), int(mem), int(peak)) for t, mem, peak in json.loads(values.pop("points")))
    return RunCurve(points=points, **values)


class RunCurves:
    """The `run_curves` table of one `Store`."""

    def __init__(self, store: Store):
        self.conn = store.db.conn

    def save(self, curve: RunCurve, keep: int = DEFAULT_KEEP) -> int:
        """Store (or replace) the curve of one run, then prune its fingerprint's older curves
        beyond the newest `keep`; returns how many were pruned. `keep` 0 stores nothing."""
        if keep < 0:
            raise ValueError(f"curves kept per fingerprint must be 0 or more, not {keep}")
        if keep == 0:
            return 0
        if not curve.points:
            raise ValueError(f"job {curve.job_id}: a curve without points is not stored")
        row = _row(curve)
        conn = self.conn
        conn.execute("begin immediate")
        try:
            conn.execute(f"insert or replace into run_curves ({', '.join(COLUMNS)}) "
                         f"values ({', '.join(':' + c for c in COLUMNS)})", row)
            pruned = conn.execute(
                "delete from run_curves where fingerprint = ?1 and rowid not in (select rowid from run_curves "
                "where fingerprint = ?1 order by ended_at desc, rowid desc limit ?2)",
                [curve.fingerprint, int(keep)],
            ).rowcount
            conn.execute("commit")
        except BaseException:
            conn.execute("rollback")
            raise
        if pruned:
            log.debug("fingerprint %s: %d older curve(s) pruned (%d kept)", curve.fingerprint, pruned, keep)
        return pruned

    def of_job(self, job_id: int) -> RunCurve | None:
        """The curve of the job's latest stored run (a requeued job has one per run)."""
        found = self.runs_of_job(job_id, limit=1)
        return found[0] if found else None

    def runs_of_job(self, job_id: int, limit: int = 10) -> list[RunCurve]:
        """The stored curves of the job's runs, the latest first."""
        rows = self.conn.execute(f"select {', '.join(COLUMNS)} from run_curves where job_id = ? "
                                 "order by ended_at desc limit ?", [job_id, int(limit)]).fetchall()
        return [_curve(r) for r in rows]

    def of_fingerprint(self, fingerprint: str | None = None, limit: int = 100) -> list[RunCurve]:
        """The stored curves of one fingerprint (None: of every one), newest first."""
        where, args = ("where fingerprint = ?", [fingerprint]) if fingerprint is not None else ("", [])
        rows = self.conn.execute(f"select {', '.join(COLUMNS)} from run_curves {where} "
                                 "order by ended_at desc limit ?", [*args, int(limit)]).fetchall()
        return [_curve(r) for r in rows]

    def prune(self, before: float) -> int:
        """Delete the curves of runs ended before ``before``; rows deleted."""
        with self.conn:
            return self.conn.execute("delete from run_curves where ended_at < ?", [before]).rowcount
