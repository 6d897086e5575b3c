"""The trace loaders: Philly's CSV and a site's ``sacct -P`` export, read strictly.

Each loader reads its file through :class:`~simulator.rows.RowReader` (lines
capped in length; a bad cell refused with its line, column and what is allowed, or skipped
and counted with ``bad_rows="skip"``) and fills a
:class:`~simulator.rows.LoadReport`. Rules (docs/simulator.md):

- GPUs: a finite number >= 0. 0: skipped (``no GPUs``). Below 1 (``gres/gpu=0.5``): a
  one-GPU job holding that share of a GPU (its memory capped to the share, see
  :func:`~simulator.workload.build_jobs`), counted in ``shares``. Above 1 with
  a fraction (1.7): rounded up to whole GPUs (the replay gives multi-GPU jobs whole GPUs),
  counted in ``rounded_up``.
- Durations: a finite number of seconds > 0 and at most :data:`MAX_DURATION_S` (ten
  years), or Slurm's ``[D-][HH:]MM:SS``; 0: skipped (``ran 0 s``); negative, NaN, inf or
  longer refused (a sum of durations beyond floats' range would make the results infinite).
- Timestamps: ISO 8601. Without a zone they are read in ``timezone`` (UTC unless given):
  the machine's own zone never matters. With a zone (``+02:00``) each is converted; a file
  mixing both is refused (which zone would the bare ones be in?).
- sacct: jobs that never started (``PENDING``, ``Start`` unknown) are counted in
  ``never_ran``; jobs still running are skipped (``still running``); steps carry the GPU
  figures (``gres/gpumem``, ``gres/gpuutil``), which must be finite and >= 0 (``gpumem``
  at most :data:`MAX_GPU_MEM_BYTES`).
"""
from __future__ import annotations

import logging
import math
import re
from datetime import datetime, timezone as dt_timezone
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from simulator.rows import LoadReport, RowReader, WorkloadError, finite_number
from simulator.workload import TraceJob, _data_file

log = logging.getLogger(__name__)

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus")
SACCT_HELP = (
    "sacct -P -a -S 2024-01-01 -E now "
    "--format=JobID,User,JobName,Submit,Start,End,Elapsed,AllocTRES,ReqTRES,State,"
    "TRESUsageInMax,TRESUsageInAve > jobs.txt  (TRESUsageIn* carry gres/gpumem and "
    "gres/gpuutil when slurm.conf has AccountingStorageTRES=gres/gpu,gres/gpumem,gres/gpuutil "
    "and an NVML-enabled slurmd; they sit on the steps, so do not pass -X)"
)
GPU_ALLOWED = "a GPU count: a finite number >= 0 (a fraction below 1 is a share of one GPU)"
MAX_DURATION_S = 10 * 365 * 86400  # ten years: longer is no job (and sums stay finite)
MAX_GPU_MEM_BYTES = 1 << 50  # 1 PiB: more is no GPU's memory
DURATION_ALLOWED = "seconds: a finite number >= 0, at most 315360000 (ten years)"
ELAPSED_ALLOWED = "[D-][HH:]MM:SS, not negative, at most ten years"
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
# bounded digit counts: a cell of 5,000 digits is a bad cell, not an int() error
_ELAPSED = re.compile(r"^(?:(\d{1,6})-)?(?:(\d{1,9}):)?(\d{1,9}):(\d{1,9}(?:\.\d{1,9})?)$")
_UNKNOWN = ("", "Unknown", "None", "N/A", "INVALID")


class Clock:
    """Timestamps to seconds since the epoch: bare ones in ``zone`` (UTC by default), zoned
    ones as they say; a file mixing bare and zoned ones is refused."""

    def __init__(self, zone: str | None, report: LoadReport):
        try:
            self.tz = ZoneInfo(zone) if zone else dt_timezone.utc
        except (ZoneInfoNotFoundError, ValueError):
            raise WorkloadError(f"--timezone {zone!r}: unknown time zone; give an IANA name "
                                f"such as UTC or Europe/Berlin") from None
        self.report = report
        self.zoned: bool | None = None  # whether the file's timestamps carry a zone
        report.timestamps = f"{zone} (--timezone)" if zone else "UTC (no zone given)"

    def read(self, reader: RowReader, line: int, column: str, text: str) -> float | None:
        try:
            dt = datetime.fromisoformat(text.strip())
        except ValueError:
            reader.bad(line, column, text, "an ISO 8601 time such as 2024-01-31T13:45:00")
            return None
        zoned = dt.tzinfo is not None
        if self.zoned is None:
            self.zoned = zoned
            if zoned:
                self.report.timestamps = "their own zones, converted to UTC"
        elif zoned != self.zoned:
            have = "with" if self.zoned else "without"
            reader.bad(line, column, text, f"a time {have} a zone, like the file's first (a file "
                                           f"mixes no zones)", "mixed time zones")
            return None
        return (dt if zoned else dt.replace(tzinfo=self.tz)).timestamp()


def gpu_request(reader: RowReader, line: int, column: str, value: float | None,
                text: str) -> tuple[int, float | None] | None:
    """(whole GPUs, share of one GPU or None) for a request; None when the row is skipped."""
    if value is None or value < 0:
        reader.bad(line, column, text, GPU_ALLOWED)
        return None
    if value == 0:
        reader.report.skip("no GPUs")
        return None
    if value < 1:
        reader.report.shares += 1
        return 1, value
    if value != int(value):
        reader.report.rounded_up += 1
        return math.ceil(value), None
    return int(value), None


def load_philly(data_dir: Path | None = None, path: Path | None = None, *,
                report: LoadReport | None = None, timezone: str | None = None,
                bad_rows: str = "refuse") -> list[TraceJob]:
    """Philly jobs, submit times in seconds from the first submission, in submit order."""
    path = path or _data_file(data_dir, "philly_jobs.csv")
    report = report if report is not None else LoadReport()
    report.source = str(path)
    reader = RowReader(path, ",", bad_rows, report)
    clock = Clock(timezone, report)
    rows = []
    for n, row in reader.rows(require=PHILLY_COLUMNS):
        ts = clock.read(reader, n, "timestamp", row["timestamp"])
        dur = finite_number(row["duration"])
        if ts is None:
            continue
        if dur is None or not 0 <= dur <= MAX_DURATION_S:
            reader.bad(n, "duration", row["duration"], DURATION_ALLOWED)
            continue
        if dur == 0:
            report.skip("ran 0 s")
            continue
        req = gpu_request(reader, n, "num_gpus", finite_number(row["num_gpus"]), row["num_gpus"])
        if req is not None:
            rows.append((ts, dur, req[0], "", None, None, req[1]))
    return _in_order(path, rows, report, "no jobs")


def _in_order(path: Path, rows: list[tuple], report: LoadReport, empty: str) -> list[TraceJob]:
    """TraceJobs from (time, duration, GPUs, workload, memory, utilisation, share) rows, in
    submit order, times from the first submission."""
    if not rows:
        raise WorkloadError(f"{path}: {empty} (rows read: {report.rows}; skipped: "
                            f"{dict(report.skipped) or 'none'}; never ran: {report.never_ran})")
    rows.sort(key=lambda r: r[:4])
    t0 = rows[0][0]
    report.jobs = len(rows)
    return [TraceJob(r[0] - t0, *r[1:]) for r in rows]


def elapsed_s(text: str) -> float | None:
    """Slurm's ``[D-][HH:]MM:SS`` in seconds; None when it is not that or is longer than
    :data:`MAX_DURATION_S`."""
    m = _ELAPSED.match(text.strip())
    if not m:
        return None
    d, h, mi, s = m.groups()
    secs = int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi) * 60 + float(s)
    return secs if secs <= MAX_DURATION_S else None


def tres_values(tres: str) -> dict[str, str]:
    """``name -> value`` of a TRES string (``cpu=4,gres/gpu=2``)."""
    out = {}
    for item in tres.split(","):
        key, sep, val = item.strip().partition("=")
        if sep:
            out[key] = val.strip()
    return out


def gpus_in_tres(tres: str) -> tuple[float, str] | None:
    """(GPUs, the text they came from) in a TRES string: ``gres/gpu=N`` (else the sum of
    ``gres/gpu:TYPE=N``) or ``gpu:[TYPE:]N`` (GRES form); None when it names none. The
    value is NaN when the text is not a finite number >= 0."""
    vals = tres_values(tres)
    if "gres/gpu" in vals:
        t = vals["gres/gpu"]
        v = finite_number(t)
        return (v if v is not None else math.nan), t
    typed = [(k, v) for k, v in vals.items() if k.startswith("gres/gpu:")]
    if typed:
        nums = [finite_number(v) for _, v in typed]
        text = ",".join(f"{k}={v}" for k, v in typed)
        return (math.nan if None in nums else sum(nums)), text
    for item in tres.split(","):
        item = item.strip()
        if item.startswith("gpu:"):
            tail = item.split(":")[-1].split("(")[0]
            v = finite_number(tail)
            return (v if v is not None else math.nan), item
    return None


def tres_amount(reader: RowReader, line: int, column: str, tres: str, name: str) -> float | None:
    """``name``'s value in a TRES string (K/M/G/T suffix binary, as sacct prints sizes);
    None when absent; a value that is not a finite number >= 0 is a bad cell (NaN back)."""
    text = tres_values(tres).get(name)
    if not text:
        return None
    mult = _UNITS.get(text[-1].upper())
    v = finite_number(text[:-1] if mult else text)
    if v is not None and name == "gres/gpumem" and not v * (mult or 1) <= MAX_GPU_MEM_BYTES:
        v = None  # 1e300G: finite, but no GPU's memory (and no int to hold it)
    if v is None or v < 0:
        most = ", at most 1P" if name == "gres/gpumem" else ""
        reader.bad(line, column, f"{name}={text}", f"{name} as a finite number >= 0{most}, "
                                                   f"with an optional K/M/G/T suffix")
        return math.nan
    return v * (mult or 1)


def load_sacct(path: str | Path, *, report: LoadReport | None = None,
               timezone: str | None = None, bad_rows: str = "refuse") -> list[TraceJob]:
    """Jobs from a ``sacct -P`` export (``|``-separated, one header line).

    Needed columns: ``Submit``; ``Elapsed`` or ``Start`` and ``End``; ``AllocTRES`` or
    ``ReqTRES`` (or ``AllocGRES``/``ReqGRES``) carrying the GPU count. Optional: ``User``,
    ``JobName`` (a workload key), ``JobID``, ``State``, ``TRESUsageInMax`` and
    ``TRESUsageInAve``. Steps (``123.batch``, ``123.0``) are not jobs; their ``gres/gpumem``
    (largest over the job and its steps, from ``TRESUsageInMax``) and ``gres/gpuutil``
    (largest step average, from ``TRESUsageInAve``) become the job's own figures.
    """
    path = Path(path)
    if not path.exists():
        raise WorkloadError(f"{path}: no such file; export one with: {SACCT_HELP}")
    report = report if report is not None else LoadReport()
    report.source = str(path)
    reader = RowReader(path, "|", bad_rows, report)
    clock = Clock(timezone, report)
    rows = []
    mem: dict[str, float] = {}
    util: dict[str, float] = {}
    for n, row in reader.rows(check=_sacct_columns):
        jid = (row.get("JobID") or "").strip()
        base = jid.split(".", 1)[0]
        m = tres_amount(reader, n, "TRESUsageInMax", row.get("TRESUsageInMax") or "", "gres/gpumem")
        u = tres_amount(reader, n, "TRESUsageInAve", row.get("TRESUsageInAve") or "", "gres/gpuutil")
        if (m is not None and math.isnan(m)) or (u is not None and math.isnan(u)):
            continue
        if m:
            mem[base] = max(m, mem.get(base, 0.0))
        if u:
            util[base] = max(u, util.get(base, 0.0))
        if "." in jid:
            report.rows -= 1  # a step, not a job
            continue
        job = _sacct_job(reader, clock, n, row)
        if job is not None:
            key = f"{row.get('User', '')}/{row.get('JobName', '')}" if (
                "User" in reader.header or "JobName" in reader.header) else ""
            rows.append((*job, key, base))
    return _in_order(path, [(*r[:2], r[2], r[4], int(mem[r[5]]) if r[5] in mem else None,
                              min(100.0, util[r[5]]) if r[5] in util else None, r[3])
                             for r in rows], report,
                     "no finished GPU jobs found (need AllocTRES with gres/gpu=N)")


def _sacct_columns(cols: list[str]) -> None:
    have = set(cols)
    if ("Submit" not in have or not _tres_columns(cols)
            or not ("Elapsed" in have or {"Start", "End"} <= have)):
        raise WorkloadError(
            f"needs columns Submit, Elapsed (or Start and End) and AllocTRES or ReqTRES; found "
            f"{sorted(have)}; export with: {SACCT_HELP}")


def _tres_columns(cols) -> list[str]:
    return [c for c in ("AllocTRES", "ReqTRES", "AllocGRES", "ReqGRES") if c in cols]


def _sacct_job(reader: RowReader, clock: Clock, n: int, row: dict[str, str]) -> tuple | None:
    """(submit, duration, GPUs, share) of a job row; None when it is skipped or counted."""
    report = reader.report
    state = (row.get("State") or "").strip().upper()
    start = (row.get("Start") or "").strip()
    if state.startswith("PENDING") or ("Start" in row and start in _UNKNOWN):
        report.never_ran += 1
        return None
    if state.startswith("RUNNING") or ("End" in row and row["End"].strip() in _UNKNOWN
                                       and "Elapsed" not in row):
        report.skip("still running")
        return None
    submit = clock.read(reader, n, "Submit", row["Submit"])
    if submit is None:
        return None
    dur = _sacct_duration(reader, clock, n, row)
    if dur is None:
        return None
    if dur == 0:
        report.skip("ran 0 s")
        return None
    found = None
    for col in _tres_columns(row):
        found = gpus_in_tres(row.get(col) or "")
        if found is not None:
            break
    if found is None:
        report.skip("no GPUs")
        return None
    value, text = found
    req = gpu_request(reader, n, col, None if math.isnan(value) else value, text)
    return None if req is None else (submit, dur, *req)


def _sacct_duration(reader: RowReader, clock: Clock, n: int, row: dict[str, str]) -> float | None:
    if "Elapsed" in row:
        dur = elapsed_s(row["Elapsed"])
        if dur is None:
            reader.bad(n, "Elapsed", row["Elapsed"], ELAPSED_ALLOWED)
        return dur
    s = clock.read(reader, n, "Start", row["Start"])
    e = clock.read(reader, n, "End", row["End"]) if s is not None else None
    if s is None or e is None:
        return None
    if not s <= e <= s + MAX_DURATION_S:
        reader.bad(n, "End", row["End"], "a time no earlier than Start, at most ten years "
                                         "after it")
        return None
    return e - s


def trace_from_spec(spec: str, data_dir: Path | None = None, *, report: LoadReport | None = None,
                    timezone: str | None = None, bad_rows: str = "refuse") -> list[TraceJob]:
    """``philly``, ``sacct:FILE`` or ``philly:FILE`` (a CSV in the Philly layout)."""
    opts = {"report": report, "timezone": timezone, "bad_rows": bad_rows}
    if spec == "philly":
        return load_philly(data_dir, **opts)
    kind, sep, rest = spec.partition(":")
    if sep and kind == "sacct" and rest:
        return load_sacct(rest, **opts)
    if sep and kind == "philly" and rest:
        return load_philly(path=Path(rest), **opts)
    raise WorkloadError(f"unknown trace {spec!r}; use philly, philly:FILE.csv or sacct:FILE")
