"""A longer trace from a Philly-layout CSV: its arrivals repeated, each copy shifted past
the one before (``gpupack simulate repeat-trace``), to time the replay on a million jobs.

Copy ``k`` (0, 1, ...) is every row with its timestamp moved by ``k`` times the trace's
span plus one mean gap between arrivals, so the copies follow each other at the trace's own
arrival rate and load; durations and GPU counts are kept. ``jobs`` cuts the result to the
first N rows by submit time (the loader orders them so).
"""
from __future__ import annotations

import csv
import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

log = logging.getLogger(__name__)

FORMAT = "%Y-%m-%d %H:%M:%S"


@dataclass(frozen=True)
class Repeated:
    """What :func:`repeat_philly` wrote."""

    rows: int
    copies: int
    shift_s: float
    first: str
    last: str


def repeat_philly(src: Path, out: Path, *, copies: int | None = None, jobs: int | None = None) -> Repeated:
    """Write ``src``'s rows ``copies`` times (default: as many as ``jobs`` needs), copy k
    shifted by k x (span + mean gap); at most ``jobs`` rows, the earliest."""
    with open(src, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = [r for r in reader if r]
    col = header.index("timestamp")
    times = [datetime.strptime(r[col], FORMAT) for r in rows]
    order = sorted(range(len(rows)), key=times.__getitem__)
    first, last = times[order[0]], times[order[-1]]
    span = (last - first).total_seconds()
    shift = timedelta(seconds=math.ceil(span + span / max(1, len(rows) - 1)))
    if copies is None:
        if jobs is None:
            raise ValueError("give copies or jobs")
        copies = math.ceil(jobs / len(rows))
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    limit = jobs if jobs is not None else copies * len(rows)
    n = 0
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for k in range(copies):
            for i in order:
                if n >= limit:
                    break
                row = list(rows[i])
                row[col] = (times[i] + k * shift).strftime(FORMAT)
                w.writerow(row)
                n += 1
    log.info("wrote %d rows (%d copies, each %s after the one before) to %s", n, copies, shift, out)
    end = first + (copies - 1) * shift + (last - first)
    return Repeated(n, copies, shift.total_seconds(), first.strftime(FORMAT), end.strftime(FORMAT))
