"""Reading a trace or pair table row by row, honestly: bounded lines, named bad cells.

:class:`RowReader` reads a delimited text file (one header line, one row per line; no
quoted newlines) a line at a time with a cap on its length (:data:`MAX_LINE_CHARS`): a
longer line is never held in memory. A bad row either stops the load with its line number,
column and what the column allows (``bad_rows="refuse"``, the default), or is skipped and
counted under its reason (``bad_rows="skip"``); rows that are fine but cannot be replayed
(no GPUs, never started) are always skipped and counted. The counts end in the run's
summary (:class:`LoadReport`).

The field parsers (:func:`finite_number`) refuse what ``float()`` would let through:
``nan``, ``inf``, empty cells.
"""
from __future__ import annotations

import csv
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

MAX_LINE_CHARS = 100_000  # below csv's field limit (131,072): a field can never exceed it
_DRAIN_CHARS = 4 << 20  # a too-long line is skipped in pieces of this size
BAD_ROWS = ("refuse", "skip")


class WorkloadError(ValueError):
    """A trace or data file that cannot be used; the message names the file and the fix."""


@dataclass
class LoadReport:
    """What a trace load kept and what it left out, by reason (for the run's summary)."""

    source: str = ""
    rows: int = 0  # data rows read (not steps, not the header)
    jobs: int = 0  # jobs kept
    skipped: Counter = field(default_factory=Counter)  # reason -> rows skipped
    never_ran: int = 0  # jobs of the trace that never started there (pending, cancelled)
    shares: int = 0  # requests below one GPU: replayed as a one-GPU job holding that share
    rounded_up: int = 0  # requests above one GPU with a fraction: rounded up to whole GPUs
    timestamps: str = "UTC (no zone given)"  # how times without a zone were read

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    def as_dict(self) -> dict:
        return {"source": self.source, "rows": self.rows, "jobs": self.jobs,
                "skipped": dict(sorted(self.skipped.items())),
                "skipped_total": sum(self.skipped.values()), "never_ran": self.never_ran,
                "shares": self.shares, "rounded_up": self.rounded_up,
                "timestamps": self.timestamps}


class RowReader:
    """Rows of ``path`` as ``(line number, {column: text})``, each line capped in length."""

    def __init__(self, path: str | Path, delimiter: str = ",", bad_rows: str = "refuse",
                 report: LoadReport | None = None, max_line: int = MAX_LINE_CHARS):
        if bad_rows not in BAD_ROWS:
            raise ValueError(f"bad_rows is one of {', '.join(BAD_ROWS)}, not {bad_rows!r}")
        self.path = Path(path)
        self.delimiter = delimiter
        self.strict = bad_rows == "refuse"
        self.report = report if report is not None else LoadReport(source=str(path))
        self.max_line = max_line
        self.header: list[str] = []

    # ------------------------------------------------------------------ bad cells
    def bad(self, line: int, column: str, got: str, allowed: str, reason: str | None = None) -> None:
        """Refuse the row (raise) or count it skipped under ``reason`` (``bad <column>``)."""
        shown = got if len(got) <= 40 else got[:37] + "..."
        if self.strict:
            raise WorkloadError(f"{self.path}:{line}: column {column}: {shown!r} is not allowed: "
                                f"{allowed} (or pass --bad-rows skip to skip such rows and count "
                                f"them)")
        self.report.skip(reason or f"bad {column}")

    # ------------------------------------------------------------------ reading
    def _lines(self, fh) -> Iterator[tuple[int, str | None]]:
        """(line number, text without its end) per line; text None for a line over the cap
        (the rest of it read in pieces and dropped, never held whole)."""
        n = 0
        cap = self.max_line
        while True:
            text = fh.readline(cap + 1)
            if not text:
                return
            n += 1
            if len(text) > cap and not text.endswith("\n"):
                yield n, None  # refused here, or (skipped) the rest is read and dropped:
                while text and not text.endswith("\n"):
                    text = fh.readline(_DRAIN_CHARS)
                continue
            yield n, text.rstrip("\r\n")

    def rows(self, require: tuple[str, ...] = (),
             check: Callable[[list[str]], None] | None = None) -> Iterator[tuple[int, dict[str, str]]]:
        """The data rows; the header must name every column of ``require`` and pass
        ``check`` (which raises :class:`WorkloadError` naming what is missing)."""
        if not self.path.exists():
            raise WorkloadError(f"{self.path}: no such file")
        with open(self.path, newline="", encoding="utf-8", errors="replace") as fh:
            lines = self._lines(fh)
            for n, text in lines:
                if text is None:
                    raise WorkloadError(f"{self.path}:{n}: the header line is longer than "
                                        f"{self.max_line:,} characters; is this a trace?")
                if text.strip():
                    self.header = [c.strip() for c in self._split(text)]
                    break
            missing = [c for c in require if c not in self.header]
            if missing:
                raise WorkloadError(f"{self.path}: no column {', '.join(missing)}; expected "
                                    f"columns {','.join(require)} (found "
                                    f"{','.join(self.header) or 'nothing'})")
            try:
                if check is not None:
                    check(self.header)
            except WorkloadError as exc:
                raise WorkloadError(f"{self.path}: {exc}") from None
            width = len(self.header)
            for n, text in lines:
                if text is None:
                    self.bad(n, "(whole line)", f"{self.max_line:,}+ characters",
                             f"a line of at most {self.max_line:,} characters", "line too long")
                    continue
                if not text.strip():
                    continue
                cells = self._split(text)
                if len(cells) != width:
                    col = self.header[len(cells)] if len(cells) < width else "(extra)"
                    self.bad(n, col, text, f"{width} fields separated by {self.delimiter!r} "
                                           f"like the header, found {len(cells)}",
                             "wrong number of fields")
                    continue
                self.report.rows += 1
                yield n, dict(zip(self.header, cells))

    def _split(self, text: str) -> list[str]:
        return next(csv.reader([text], delimiter=self.delimiter))


def finite_number(text: str) -> float | None:
    """``text`` as a finite float; None for empty text, ``nan``, ``inf`` or no number."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
