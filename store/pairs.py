"""The store's tables of workload pairs: the pairs that must never share a GPU
(``avoid_pairs``, written by the contention watch) and the measured speed of a workload beside
another (``pair_speeds``, what the steering's and the submit path's pair knowledge learn from).

Reached as ``Store.pairs``; the tables are created by the store's migrations (``store.db``).
"""
from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

import sqlite_utils


@dataclass(frozen=True)
class PairSpeed:
    """Workload ``fp_a``'s measured speed beside ``fp_b`` (1.0: as fast as before it joined)."""

    fp_a: str
    fp_b: str
    speed: float
    samples: int
    updated_at: float


class PairTables:
    """Reads and writes the two pair tables of one store's database."""

    def __init__(self, db: sqlite_utils.Database):
        self.db = db

    # -- pairs that must not share a GPU ------------------------------------------------
    def avoid_pair(self, fp_a: str, fp_b: str, reason: str) -> None:
        a, b = sorted((fp_a, fp_b))
        self.db["avoid_pairs"].insert(
            {"fp_a": a, "fp_b": b, "reason": reason, "created_at": time.time()}, replace=True
        )

    def avoided_with(self, fingerprint: str) -> set[str]:
        rows = self.db.execute(
            "select fp_b from avoid_pairs where fp_a = ? union select fp_a from avoid_pairs where fp_b = ?",
            [fingerprint, fingerprint],
        ).fetchall()
        return {r[0] for r in rows}

    def avoided_with_each(self, fingerprints: Iterable[str]) -> dict[str, set[str]]:
        """`avoided_with` for many fingerprints in one statement (the steering watch asks
        for every pending packed job each round); every fingerprint asked for is a key."""
        wanted = sorted(set(fingerprints))
        found: dict[str, set[str]] = {fp: set() for fp in wanted}
        if not wanted:
            return found
        rows = self.db.execute(  # one pass over the pairs, each side looked up in the list asked for
            "select fp_a, fp_b from avoid_pairs where fp_a in (select value from json_each(?1)) "
            "or fp_b in (select value from json_each(?1))",
            [json.dumps(wanted)],
        ).fetchall()
        for fp_a, fp_b in rows:
            if fp_a in found:
                found[fp_a].add(fp_b)
            if fp_b in found:
                found[fp_b].add(fp_a)
        return found

    def must_avoid(self, fp_a: str, fp_b: str) -> bool:
        a, b = sorted((fp_a, fp_b))
        return self.db.execute(
            "select 1 from avoid_pairs where fp_a = ? and fp_b = ?", [a, b]
        ).fetchone() is not None

    # -- measured pair speeds (what the steering's pair knowledge learns from) ---------
    def record_pair_speed(self, fp_a: str, fp_b: str, speed: float) -> PairSpeed:
        """Add one measure of ``fp_a``'s speed beside ``fp_b`` (after / before); the row keeps
        the mean of every measure. Returns the row as it is now."""
        if not math.isfinite(speed) or speed < 0:
            raise ValueError(f"pair speed of {fp_a} beside {fp_b} must be a finite ratio >= 0, got {speed}")
        now = time.time()
        self.db.execute(
            "insert into pair_speeds (fp_a, fp_b, speed, samples, updated_at) values (?1, ?2, ?3, 1, ?4) "
            "on conflict (fp_a, fp_b) do update set speed = (speed * samples + ?3) / (samples + 1), "
            "samples = samples + 1, updated_at = ?4",
            [fp_a, fp_b, float(speed), now],
        )
        row = self.db.execute("select fp_a, fp_b, speed, samples, updated_at from pair_speeds "
                              "where fp_a = ? and fp_b = ?", [fp_a, fp_b]).fetchone()
        return PairSpeed(*row)

    def pair_speeds(self) -> dict[tuple[str, str], PairSpeed]:
        """Every measured pair, (fp_a, fp_b) -> its row."""
        rows = self.db.execute("select fp_a, fp_b, speed, samples, updated_at from pair_speeds").fetchall()
        return {(r[0], r[1]): PairSpeed(*r) for r in rows}

    def pair_speeds_with(self, fingerprint: str, others: Iterable[str]) -> dict[tuple[str, str], float]:
        """The measured speeds of ``fingerprint`` beside each of ``others`` and theirs beside it
        (the submit path's load-aware admission: primary-key look-ups, not the whole table)."""
        rows = self.db.execute(
            "select fp_a, fp_b, speed from pair_speeds where fp_a = ?1 and fp_b in (select value from json_each(?2)) "
            "union all select fp_a, fp_b, speed from pair_speeds "
            "where fp_a in (select value from json_each(?2)) and fp_b = ?1",
            [fingerprint, json.dumps(sorted(set(others)))]).fetchall()
        return {(a, b): s for a, b, s in rows}
