"""The queue as formatted text (`squeue -h -O ...`), parsed into the same `Job` as the JSON.

Why: `squeue --json` of a long queue costs the client seconds (22.05 lists every job it knows
whatever is asked; 1.95 s for 10,000 jobs against 0.11 s formatted, issue 36), and the watcher
reads the queue every round. The formatted listing carries the fields the rules read; what it
cannot carry (`gres_detail`, the GPU indexes of a running job; `excluded_nodes` on 22.05, whose
`-O` has no ExcNodes) comes from the JSON of only the jobs that need it (`queue_read`).

Hostile text: a job's name, comment, output paths and working folder are written by its user and
may hold spaces, newlines, the delimiters, anything. Every field is printed at full width
(`name:0`) and followed by a marker made of a random token chosen for this one call (`Markers`):
a job submitted before the call cannot contain it, so a record splits into exactly its fields or
is refused (counted in `FormattedListing.skipped`, never guessed at).

Times are read as UTC: the command runs with TZ=UTC (`build.formatted_jobs_args`' environment).
"""
from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from packer.gres import GresItem
from slurm_plugin.slurm.gres import REQUEST_FIELDS, expand_hostlist, parse_gres_list
from slurm_plugin.slurm.model import Job, SlurmVersion
from slurm_plugin.slurm.parse import decode_exit_code

_NONE = ("", "(null)", "N/A", "n/a", "None", "NONE", "Unknown", "(None)")  # NONE: a running job's end, no limit
_DURATION = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)$")
_HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})


@dataclass(frozen=True)
class Markers:
    """The field and record ends of one call: a fresh random token each (`Markers.new()`)."""

    token: str

    @classmethod
    def new(cls) -> "Markers":
        return cls(secrets.token_hex(6))  # 48 random bits, new each call

    @property
    def field_end(self) -> str:
        return f"~{self.token}~"

    @property
    def record_end(self) -> str:
        return f"~{self.token}#~"


def _text(value: str) -> str | None:
    return None if value in _NONE else value


def _int(value: str) -> int | None:
    value = value.strip()
    if value in _NONE:
        return None
    if value.lstrip("-").isdigit() and value.isascii():
        return int(value)
    raise ValueError(f"expected a number, got {value!r}")


def _time(value: str) -> datetime | None:
    if value in _NONE:
        return None
    if len(value) != 19 or value[10] != "T":
        raise ValueError(f"expected a time like 2026-01-31T12:00:00, got {value!r}")
    return datetime.fromisoformat(value).replace(tzinfo=timezone.utc)


def _limit_s(value: str) -> int | None:
    """`1-02:03:04`, `02:03:04`, `03:04` -> seconds; UNLIMITED/INVALID/NOT_SET -> None."""
    match = _DURATION.match(value.strip())
    if not match:
        if value.strip() in ("UNLIMITED", "INVALID", "NOT_SET", "INFINITE", "Partition_Limit", *_NONE):
            return None
        raise ValueError(f"expected a time limit, got {value!r}")
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return total or None


def _exit(value: str) -> tuple[int | None, int | None]:
    """`3:0` (code:signal), or a raw wait status (`768`: exit 3) as 22.05 prints it."""
    if value.isascii() and value.isdigit():
        return decode_exit_code(int(value))
    code, sep, signal = value.partition(":")
    if not sep or not code.isdigit() or not signal.isdigit():
        if value in _NONE:
            return None, None
        raise ValueError(f"expected CODE:SIGNAL, got {value!r}")
    return int(code), int(signal) or None


def _flag(value: str) -> bool | None:
    if value in ("1", "YES", "yes", "true"):
        return True
    if value in ("0", "NO", "no", "false"):
        return False
    if value in _NONE:
        return None
    raise ValueError(f"expected 0 or 1, got {value!r}")


def _array_task(value: str) -> int | None:
    """A pending array's tasks print as a range (`1-9%2`): not one task, so None."""
    return _int(value) if value.isdigit() or value in _NONE else None


def _user_id(value: str) -> int | None:
    """`UserId` prints `name(1000)` on some releases and `1000` on others."""
    match = re.fullmatch(r"(?:.*\()?(\d+)\)?", value)
    if match:
        return int(match.group(1))
    if value in _NONE:
        return None
    raise ValueError(f"expected a uid, got {value!r}")


#: (squeue -O field, Job attribute, reader), in the order printed; the job id first.
Field = tuple[str, str, Callable[[str], object]]
FIELDS: tuple[Field, ...] = (
    ("JobId", "job_id", _int),
    ("State", "state", lambda v: _text(v.strip())),
    ("Reason", "state_reason", _text),
    ("PriorityLong", "priority", _int),
    ("NodeList", "nodes", _text),
    ("NumNodes", "node_count", _int),
    ("Partition", "partition", _text),
    ("QOS", "qos", _text),
    ("Reservation", "reservation", _text),
    ("Feature", "features", _text),
    ("tres-per-node", "tres_per_node", _text),
    ("tres-per-job", "tres_per_job", _text),
    ("tres-per-task", "tres_per_task", _text),
    ("tres-per-socket", "tres_per_socket", _text),
    ("admin_comment", "admin_comment", _text),
    ("UserName", "user", _text),
    ("UserId", "user_id", _user_id),
    ("SubmitTime", "submit_time", _time),
    ("StartTime", "start_time", _time),
    ("EndTime", "end_time", _time),
    ("TimeLimit", "time_limit_s", _limit_s),
    ("RestartCnt", "restart_cnt", _int),
    ("Requeue", "requeue", _flag),
    ("ReqNodes", "required_nodes", lambda v: expand_hostlist(_text(v))),
    ("ArrayJobId", "array_job_id", lambda v: _int(v) or None),
    ("ArrayTaskId", "array_task_id", _array_task),
    ("exit_code", "exit_code", _exit),
    ("BatchHost", "batch_host", _text),
    ("Licenses", "licenses", _text),
    ("WorkDir", "work_dir", _text),
    ("StdOut", "std_out", _text),
    ("StdErr", "std_err", _text),
    ("Comment", "comment", _text),
    ("Name", "name", _text),
)
_ARRAY_TASK = [attr for _n, attr, _r in FIELDS].index("array_task_id")
#: From 24.05 `-O` has ExcNodes (22.05-23.11 only `-o %x`, which cannot be mixed with `-O`).
EXCLUDED: Field = ("ExcNodes", "excluded_nodes", lambda v: expand_hostlist(_text(v)))
#: Fields no formatted listing carries: read from the JSON of the jobs that need them.
#: (`exclusive` too: `OverSubscribe` is no word for it, 26.05 prints NO for a plain job; no rule reads it)
NOT_FORMATTED = ("gres_detail", "state_flags", "tasks", "exclusive")


def fields_for(version: SlurmVersion | None) -> tuple[Field, ...]:
    """The fields printed on ``version``: ExcNodes where `-O` has it."""
    if version is not None and (version.major, version.minor) >= (24, 5):
        return FIELDS[:-1] + (EXCLUDED, FIELDS[-1])
    return FIELDS


def carries_excluded(version: SlurmVersion | None) -> bool:
    return EXCLUDED in fields_for(version)


def format_spec(fields: tuple[Field, ...], markers: Markers) -> str:
    """The `-O` argument: every field at full width, each followed by its end marker."""
    ends = [markers.field_end] * (len(fields) - 1) + [markers.record_end]
    return ",".join(f"{name}:0{end}" for (name, _a, _r), end in zip(fields, ends))


@dataclass(frozen=True)
class FormattedListing:
    """The jobs of one formatted listing, and the records refused with the reason."""

    jobs: tuple[Job, ...]
    skipped: tuple[str, ...] = ()


def _job(values: list[str], fields: tuple[Field, ...]) -> Job:
    attrs: dict[str, object] = {}
    for (name, attr, read), value in zip(fields, values):
        try:
            attrs[attr] = read(value)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    code, signal = attrs.pop("exit_code") or (None, None)  # type: ignore[misc]
    gres: list[GresItem] = []
    for key, per in REQUEST_FIELDS.items():
        text = attrs.pop(key, None)
        if isinstance(text, str):
            gres.extend(parse_gres_list(text, per=per))
    job_id = attrs.pop("job_id")
    if not isinstance(job_id, int) or job_id <= 0:
        raise ValueError(f"JobId: not a positive job id: {job_id!r}")
    if attrs["array_job_id"] == job_id and attrs["array_task_id"] is None and values[_ARRAY_TASK] in _NONE:
        attrs["array_job_id"] = None  # squeue prints the job's own id for a job of no array
    state = attrs["state"]
    held = None if state is None else state == "PENDING" and (
        attrs["priority"] == 0 or attrs["state_reason"] in _HELD_REASONS)
    return Job(job_id=job_id, gres=tuple(gres), exit_code=code, exit_signal=signal, held=held,
               **attrs)  # type: ignore[arg-type]


class RecordMemo:
    """The jobs of the last listing, each with a hash of its record's values: a record printed
    the same again (most of a long queue, round after round) is not read again, its `Job` (a
    frozen record) is taken as it was. Only the last listing's records are held."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[int, Job]] = {}  # the job id's text -> (hash of the values, job)
        self.fields: tuple[Field, ...] | None = None
        self.reused = 0  # records taken from the memo, over its life
        self.read = 0  # records read afresh

    def __len__(self) -> int:
        return len(self._held)


def parse_formatted(text: str, markers: Markers, fields: tuple[Field, ...],
                    memo: RecordMemo | None = None) -> FormattedListing:
    """The records of `squeue -h -O format_spec(fields, markers)`; a record that does not split
    into exactly its fields, or whose values do not read, is refused and said why. ``memo``:
    the records of the listing before (of the same fields), kept for the next one."""
    jobs: list[Job] = []
    skipped: list[str] = []
    chunks = text.split(markers.record_end)
    tail = chunks.pop()  # after the last record: its newline only
    seen: set[int] = set()
    held = memo._held if memo is not None and memo.fields == fields else {}
    kept: dict[str, tuple[int, Job]] = {}
    reused = 0
    for chunk in chunks:
        chunk = chunk[1:] if chunk.startswith("\n") else chunk  # the newline squeue ends a record with
        values = chunk.split(markers.field_end)
        if len(values) != len(fields):
            skipped.append(f"a record of {len(values)} fields, {len(fields)} expected: {chunk[:60]!r}")
            continue
        digest = hash(tuple(values))  # SipHash, keyed per process: a user cannot aim a record at another's
        before = held.get(values[0])
        if before is not None and before[0] == digest:
            job = before[1]
            reused += 1
        else:
            try:
                job = _job(values, fields)
            except ValueError as exc:
                skipped.append(f"record {values[0][:20]!r}: {exc}")
                continue
        kept[values[0]] = (digest, job)
        if job.job_id in seen:
            skipped.append(f"job {job.job_id} listed twice")
            continue
        seen.add(job.job_id)
        jobs.append(job)
    if tail.strip():
        skipped.append(f"text after the last record: {tail[:60]!r}")
    if memo is not None:
        memo.reused += reused
        memo.read += len(kept) - reused
        memo._held, memo.fields = kept, fields
    return FormattedListing(tuple(jobs), tuple(skipped))


def with_detail(job: Job, detail: Job | None, *, excluded: bool) -> Job:
    """``job`` from the formatted listing with what only the JSON carries, from ``detail`` (the
    same job's JSON record); ``excluded``: take its excluded nodes too (the listing lacks them)."""
    if detail is None:
        return job
    extra: dict[str, object] = {"gres_detail": detail.gres_detail, "state_flags": detail.state_flags,
                                "tasks": detail.tasks, "exclusive": detail.exclusive}
    if excluded:
        extra["excluded_nodes"] = detail.excluded_nodes
    return replace(job, **extra)
