"""Memory series files: CSV with a header ``step,bytes`` and an optional ``reuse_ratio``.

Lines starting with ``#`` and blank lines are ignored; other columns are ignored too.
Errors name the file and the line so a person can fix the file.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Series", "SeriesFormatError", "read_prior", "read_series", "parse_series", "write_series"]


class SeriesFormatError(ValueError):
    """A series file that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Series:
    steps: tuple[float, ...]
    bytes: tuple[float, ...]
    reuse_ratio: tuple[float, ...] | None = None
    name: str = ""

    def __len__(self) -> int:
        return len(self.steps)

    def samples(self):
        """Yield ``(step, bytes, reuse_ratio or None)``."""
        ratios = self.reuse_ratio or (None,) * len(self.steps)
        yield from zip(self.steps, self.bytes, ratios)

    def head(self, upto_step: float) -> Series:
        """The samples with ``step <= upto_step``."""
        k = sum(1 for s in self.steps if s <= upto_step)
        return Series(self.steps[:k], self.bytes[:k], self.reuse_ratio[:k] if self.reuse_ratio else None, self.name)


def _number(text: str, what: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SeriesFormatError(f"{where}: {what} {text.strip()!r} is not a number") from None
    if not math.isfinite(value):
        raise SeriesFormatError(f"{where}: {what} {text.strip()!r} is not a finite number")
    return value


def parse_series(text: str, name: str = "<series>") -> Series:
    """Parse the text of a series file (see the module docstring)."""
    rows = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    steps: list[float] = []
    values: list[float] = []
    ratios: list[float] = []
    i_step = i_bytes = i_ratio = -1
    for lineno, row in enumerate(rows, start=1):
        if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
            continue
        where = f"{name}:{lineno}"
        if header is None:
            header = [c.strip().lower() for c in row]
            if "step" not in header or "bytes" not in header:
                raise SeriesFormatError(
                    f"{where}: missing header: the first line must name the columns 'step,bytes' "
                    f"(optionally ',reuse_ratio'), found {','.join(row)!r}"
                )
            i_step, i_bytes = header.index("step"), header.index("bytes")
            i_ratio = header.index("reuse_ratio") if "reuse_ratio" in header else -1
            continue
        if len(row) < len(header):
            raise SeriesFormatError(f"{where}: expected {len(header)} columns ({','.join(header)}), found {len(row)}")
        step = _number(row[i_step], "step", where)
        value = _number(row[i_bytes], "bytes", where)
        if value < 0:
            raise SeriesFormatError(f"{where}: bytes {row[i_bytes].strip()!r} is negative")
        if steps and step <= steps[-1]:
            raise SeriesFormatError(
                f"{where}: steps must strictly increase, but step {row[i_step].strip()} follows {steps[-1]:g}"
            )
        steps.append(step)
        values.append(value)
        if i_ratio >= 0:
            ratio = _number(row[i_ratio], "reuse_ratio", where)
            if not 0.0 < ratio <= 1.0:
                raise SeriesFormatError(f"{where}: reuse_ratio {row[i_ratio].strip()!r} is not in (0, 1]")
            ratios.append(ratio)
    if header is None:
        raise SeriesFormatError(f"{name}: empty file: expected a header 'step,bytes' and samples")
    if not steps:
        raise SeriesFormatError(f"{name}: no samples after the header")
    return Series(tuple(steps), tuple(values), tuple(ratios) if i_ratio >= 0 else None, name)


def read_series(path: str | Path) -> Series:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SeriesFormatError(f"{p}: not a text file") from None
    return parse_series(text, str(p))


def read_prior(path: str | Path):
    """An earlier run's curve (a series file, ``step,bytes``) as a
    :class:`predictor.prior.PriorRun` named after the file."""
    from predictor.prior import PriorRun

    series = read_series(path)
    if series.reuse_ratio:
        raise SeriesFormatError(f"{path}: an earlier run's curve is step,bytes of the memory used (no reuse_ratio)")
    return PriorRun(series.steps, series.bytes, name=str(path))


def write_series(path: str | Path, rows, comments: list[str] | None = None, reuse: bool = False) -> None:
    """Write ``(step, bytes[, reuse_ratio])`` rows, integers where they are integral."""

    def fmt(v: float) -> str:
        return str(int(v)) if float(v).is_integer() else repr(float(v))

    lines = [f"# {c}" for c in comments or []]
    lines.append("step,bytes,reuse_ratio" if reuse else "step,bytes")
    for row in rows:
        lines.append(",".join(fmt(v) for v in row))
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
