"""Pure parsers of Slurm's JSON (squeue, scontrol, sinfo, sacct) and version text.

Two dialects, told apart by the document's `meta` (and, without one, by each
field's shape):

* Slurm 22.05, openapi v0.0.38: `meta.Slurm.version` of ints, `job_state` a string,
  numbers and times plain ints, `exit_code` a raw wait status (768 = exit 3).
* Slurm 23.11+, data_parser v0.0.40 and later: `meta.plugin.data_parser`,
  `meta.slurm.version` of strings, `job_state` a list (base state + flags), numbers
  and times as `{"set": true, "infinite": false, "number": N}`, `exit_code` an object.

Tolerance: unknown fields are ignored, missing ones become None, a field of the wrong
shape is logged and becomes None (with `strict=True` it raises `SlurmParseError`
naming the field). Only a record without a usable id is left out, and the document
says so in `skipped`.
"""
from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any, TypeVar

from packer.gres import GresItem
from slurm_plugin.slurm.errors import SlurmParseError
from slurm_plugin.slurm.gres import (
    REQUEST_FIELDS,
    expand_hostlist,
    parse_gres_item,
    parse_gres_list,
)
from slurm_plugin.slurm.model import (
    BASE_JOB_STATES,
    Dialect,
    Job,
    JobsDocument,
    Node,
    NodesDocument,
    SlurmVersion,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Flags that squeue shows instead of the base state (Slurm's `job_state_string`).
_SHOWN_FLAGS = (
    "COMPLETING",
    "CONFIGURING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "REVOKED",
    "RESV_DEL_HOLD",
    "SIGNALING",
    "STAGE_OUT",
)
_VERSION_RE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
_PARSER_RE = re.compile(r"v\d+\.\d+\.\d+")


# --------------------------------------------------------------------------- documents


def loads(text: str | bytes, source: str = "Slurm output") -> dict[str, Any]:
    """Decode a JSON document; SlurmParseError (naming `source`) when it is not one."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmParseError(source, f"not JSON ({exc.msg} at line {exc.lineno})", text[:80]) from exc
    if not isinstance(doc, dict):
        raise SlurmParseError(source, "expected a JSON object", doc)
    return doc


def parse_version_output(text: str) -> SlurmVersion:
    """`slurm-wlm 22.05.8` / `slurm 23.11.4` (from `scontrol --version`)."""
    match = _VERSION_RE.search(text or "")
    if not match:
        raise SlurmParseError("version", "no Slurm version in the text", text)
    major, minor, micro = match.groups()
    return SlurmVersion(int(major), int(minor), int(micro or 0))


def detect_dialect(doc: Mapping[str, Any]) -> Dialect:
    """Read the dialect from `meta`: `plugin.data_parser`, `plugin.type`, `slurm.version`."""
    meta = doc.get("meta")
    if not isinstance(meta, dict):
        return Dialect("unknown")
    plugin = meta.get("plugin") if isinstance(meta.get("plugin"), Mapping) else {}
    slurm = meta.get("slurm") or meta.get("Slurm")
    version: SlurmVersion | None = None
    if isinstance(slurm, dict) and isinstance(slurm.get("version"), Mapping):
        v = slurm["version"]
        try:
            version = SlurmVersion(int(v.get("major")), int(v.get("minor")), int(v.get("micro") or 0))
        except (TypeError, ValueError):
            log.warning("unreadable meta.slurm.version %r", v)
    if version is None and isinstance(slurm, dict) and isinstance(slurm.get("release"), str):
        try:
            version = parse_version_output(slurm["release"])
        except SlurmParseError:
            pass
    parser = None
    for key in ("data_parser", "type"):
        value = plugin.get(key)
        if isinstance(value, str):
            match = _PARSER_RE.search(value)
            if match:
                parser = match.group(0)
                break
    if parser is None and version is not None:
        parser = version.data_parser
    return Dialect(parser or "unknown", version)


def _messages(doc: Mapping[str, Any], key: str) -> tuple[str, ...]:
    entries = doc.get(key)
    if not isinstance(entries, list):
        return ()
    out = []
    for entry in entries:
        if isinstance(entry, dict):
            parts = [str(entry.get("source") or "").strip()]
            text = str(entry.get("description") or entry.get("error") or "").strip()
            if entry.get("error") and entry.get("description"):
                text += f" ({entry['error']})"
            parts.append(text)
            out.append(": ".join(p for p in parts if p) or json.dumps(entry))
        else:
            out.append(str(entry))
    return tuple(out)


def _parse_records(records: list, kind: str, parse: Callable[..., T],
                   strict: bool) -> tuple[tuple[T, ...], tuple[str, ...]]:
    """A document's `kind` records (job, node), parsed, and the reasons for those left out (a
    record without a usable id); with `strict` the first such record raises instead."""
    parsed: list[T] = []
    skipped: list[str] = []
    for index, record in enumerate(records):
        try:
            parsed.append(parse(record, path=f"{kind}s[{index}]", strict=strict))
        except SlurmParseError as exc:
            if strict:
                raise
            log.warning("skipping a %s record: %s", kind, exc)
            skipped.append(str(exc))
    return tuple(parsed), tuple(skipped)


def parse_jobs_document(doc: Mapping[str, Any], *, strict: bool = False) -> JobsDocument:
    """squeue --json, scontrol --json show job, or sacct --json, any dialect."""
    if not isinstance(doc, dict):
        raise SlurmParseError("<document>", "expected a JSON object", doc)
    dialect = detect_dialect(doc)
    records = doc.get("jobs")
    if not isinstance(records, list):
        raise SlurmParseError("jobs", "missing or not a list", records)
    jobs, skipped = _parse_records(records, "job", parse_job, strict)
    return JobsDocument(
        dialect=dialect,
        jobs=jobs,
        errors=_messages(doc, "errors"),
        warnings=_messages(doc, "warnings"),
        skipped=skipped,
    )


def parse_jobs(doc: Mapping[str, Any], *, strict: bool = False) -> list[Job]:
    """The jobs of a squeue/scontrol/sacct JSON document."""
    return list(parse_jobs_document(doc, strict=strict).jobs)


def parse_nodes_document(doc: Mapping[str, Any], *, strict: bool = False) -> NodesDocument:
    """scontrol --json show node (23.02+) or sinfo --json (22.05)."""
    if not isinstance(doc, dict):
        raise SlurmParseError("<document>", "expected a JSON object", doc)
    dialect = detect_dialect(doc)
    records = doc.get("nodes")
    if not isinstance(records, list):
        hint = "missing or not a list"
        if "sinfo" in doc:
            hint += "; this is `sinfo --json` of Slurm 23.11+, use `scontrol --json show node`"
        raise SlurmParseError("nodes", hint, None if records is None else records)
    nodes, skipped = _parse_records(records, "node", parse_node, strict)
    return NodesDocument(
        dialect=dialect,
        nodes=nodes,
        errors=_messages(doc, "errors"),
        warnings=_messages(doc, "warnings"),
        skipped=skipped,
    )


def parse_nodes(doc: Mapping[str, Any], *, strict: bool = False) -> list[Node]:
    return list(parse_nodes_document(doc, strict=strict).nodes)


# --------------------------------------------------------------------------- fields


class _Reader:
    """Reads one record's fields by shape; a bad field is logged and read as None."""

    def __init__(self, record: Mapping[str, Any], path: str, strict: bool) -> None:
        self.record = record
        self.path = path
        self.strict = strict

    def bad(self, key: str, message: str, value: object) -> None:
        error = SlurmParseError(f"{self.path}.{key}", message, value)
        if self.strict:
            raise error
        log.warning("ignoring a field: %s", error)

    def get(self, key: str, source: Mapping[str, Any] | None = None) -> Any:
        source = self.record if source is None else source
        return source.get(key) if isinstance(source, dict) else None

    def number(self, key: str, value: Any = None, *, use_value: bool = False) -> int | None:
        """An int, a float, a digit string, or {"set","infinite","number"}."""
        value = value if use_value else self.get(key)
        if value is None or isinstance(value, bool):
            if isinstance(value, bool):
                self.bad(key, "expected a number", value)
            return None
        if isinstance(value, dict):
            if value.get("infinite") is True or value.get("set") is False:
                return None
            return self.number(key, value.get("number"), use_value=True)
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return int(value)
        if isinstance(value, str) and value.isascii() and value.strip().lstrip("-").isdigit():
            return int(value)
        self.bad(key, "expected a number", value)
        return None

    def text(self, key: str, value: Any = None, *, use_value: bool = False) -> str | None:
        """A string; "" and Slurm's placeholders become None."""
        value = value if use_value else self.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            self.bad(key, "expected a string", value)
            return None
        return None if value in ("", "(null)") else value

    def time(self, key: str, value: Any = None, *, use_value: bool = False) -> datetime | None:
        """Seconds since the epoch (0 means unset), or an {"number"} object; UTC."""
        seconds = self.number(key, value if use_value else self.get(key), use_value=True)
        if not seconds or seconds < 0:
            return None
        try:
            return datetime.fromtimestamp(seconds, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            self.bad(key, "time out of range", seconds)
            return None

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.get(key)
        if value is None or value == "":
            return ()
        if isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip())
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        self.bad(key, "expected a string or a list of strings", value)
        return ()

    def flag(self, key: str) -> bool | None:
        value = self.get(key)
        if value is None or isinstance(value, bool):
            return value
        self.bad(key, "expected true or false", value)
        return None


def normalise_job_state(value: Any) -> tuple[str | None, tuple[str, ...]]:
    """`"RUNNING"` or `["PENDING", "REQUEUED"]` -> (state shown as squeue shows it, flags).

    The single state is the flag squeue would show (REQUEUED, COMPLETING, ...) when
    there is one, else the base state; the flags are every other entry of a list.
    """
    if isinstance(value, str):
        entries = [value]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        entries = list(value)
    else:
        raise ValueError(f"expected a string or a list of strings, got {value!r}")
    entries = [e.strip().upper() for e in entries if e.strip()]
    if not entries:
        return None, ()
    shown = next((e for e in entries if e in _SHOWN_FLAGS), None)
    if shown is None:
        shown = next((e for e in entries if e in BASE_JOB_STATES), entries[0])
    return shown, tuple(e for e in entries if e != shown)


def decode_exit_code(value: Any) -> tuple[int | None, int | None]:
    """(return code, signal) from a 22.05 wait status int or a 23.11+ exit-code object."""
    if value is None or isinstance(value, bool):
        return None, None
    if isinstance(value, int):
        if value < 0:
            return None, None
        return (value >> 8) & 0xFF, (value & 0x7F) or None
    if isinstance(value, str) and ":" in value:  # "3:0" as scontrol prints it
        code, _, signal = value.partition(":")
        if (code.isascii() and code.isdigit()) and (signal.isascii() and signal.isdigit()):
            return int(code), int(signal) or None
    if isinstance(value, dict):
        reader = _Reader(value, "exit_code", False)
        code = reader.number("return_code")
        signal_obj = value.get("signal")
        signal = None
        if isinstance(signal_obj, dict):
            signal = reader.number("signal.id", signal_obj.get("id"), use_value=True)
            signal = signal or None
        status = value.get("status")
        statuses = [status] if isinstance(status, str) else status if isinstance(status, list) else []
        if code is None and any(s in ("SUCCESS",) for s in statuses):
            code = 0
        return code, signal
    raise ValueError(f"unreadable exit code {value!r}")


def _exclusive(reader: _Reader) -> bool | None:
    exclusive = reader.get("exclusive")
    shared = reader.get("shared")
    if isinstance(exclusive, list):  # v0.0.40+: ["true"] / ["user"] / ["false"] / []
        values = {str(v).lower() for v in exclusive}
        if values - {"false", "oversubscribe"}:
            return True
    elif isinstance(exclusive, bool):
        return exclusive
    if isinstance(shared, str):  # 22.05: "none" for --exclusive, "oversubscribe", "user"...
        return shared.lower() in ("none", "user", "mcs", "topo")
    if isinstance(shared, list):  # v0.0.40+; 24.11 (v0.0.42) drops `exclusive` and says it only here
        if any(str(v).lower() in ("none", "user", "mcs", "topo") for v in shared):
            return True
        if isinstance(exclusive, list) or shared:  # v0.0.40/41 state it in `exclusive`
            return False
        # an empty list alone states nothing: 24.11 prints it for a plain job, and 26.05
        # (v0.0.45) for an --exclusive one too (only `scontrol show job` says Exclusive=NODE)
        return None
    if "shared" in reader.record and shared is None:  # 22.05: null when not asked
        return False
    return False if isinstance(exclusive, list) else None


def _gres_detail(reader: _Reader) -> tuple[GresItem, ...]:
    value = reader.get("gres_detail")
    if value is None:
        return ()
    if not isinstance(value, list):
        reader.bad("gres_detail", "expected a list of strings", value)
        return ()
    items = []
    for entry in value:
        item = parse_gres_item(entry) if isinstance(entry, str) else None
        if item is not None:
            items.append(item)
    return tuple(items)


def _user_id(reader: _Reader) -> str | None:
    uid = reader.number("user_id")
    return None if uid is None else str(uid)


def _job_id(record: Any, path: str) -> int:
    if not isinstance(record, dict):
        raise SlurmParseError(path, "expected an object", record)
    value = record.get("job_id")
    if isinstance(value, dict):
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SlurmParseError(f"{path}.job_id", "missing or not a number", value)
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise SlurmParseError(f"{path}.job_id", "not a number", value)
    job_id = int(value)
    if job_id <= 0:
        raise SlurmParseError(f"{path}.job_id", "not a positive job id", value)
    return job_id


def parse_job(record: Any, *, path: str = "job", strict: bool = False) -> Job:
    """One job record of squeue/scontrol (any dialect) or sacct (`state`/`time` objects)."""
    job_id = _job_id(record, path)
    reader = _Reader(record, path, strict)
    if isinstance(record.get("state"), Mapping) or isinstance(record.get("time"), Mapping):
        return _parse_accounting_job(job_id, reader)

    try:
        state, flags = (None, ()) if record.get("job_state") is None else normalise_job_state(
            record.get("job_state")
        )
    except ValueError:
        reader.bad("job_state", "expected a string or a list of strings", record.get("job_state"))
        state, flags = None, ()
    try:
        exit_code, exit_signal = decode_exit_code(record.get("exit_code"))
    except ValueError:
        reader.bad("exit_code", "expected a number or an exit-code object", record.get("exit_code"))
        exit_code = exit_signal = None

    gres: list[GresItem] = []
    for key, per in REQUEST_FIELDS.items():
        value = reader.text(key)
        if value:
            gres.extend(parse_gres_list(value, per=per))

    priority = reader.number("priority")
    state_reason = reader.text("state_reason")
    held = reader.flag("hold")
    if held is None and state is not None:
        held = state == "PENDING" and priority == 0 if priority is not None else None
    return Job(
        job_id=job_id,
        name=reader.text("name"),
        user=reader.text("user_name") or reader.text("user") or _user_id(reader),
        state=state,
        state_flags=flags,
        state_reason=None if state_reason == "None" else state_reason,
        partition=reader.text("partition"),
        nodes=reader.text("nodes"),
        gres=tuple(gres),
        gres_detail=_gres_detail(reader),
        admin_comment=reader.text("admin_comment"),
        comment=reader.text("comment"),
        priority=priority,
        submit_time=reader.time("submit_time"),
        start_time=reader.time("start_time"),
        end_time=reader.time("end_time"),
        exit_code=exit_code,
        exit_signal=exit_signal,
        excluded_nodes=expand_hostlist(reader.text("excluded_nodes")),
        required_nodes=expand_hostlist(reader.text("required_nodes")),
        restart_cnt=reader.number("restart_cnt"),
        batch_host=reader.text("batch_host"),
        exclusive=_exclusive(reader),
        node_count=reader.number("node_count"),
        tasks=reader.number("tasks"),
        held=held,
        requeue=reader.flag("requeue"),
        qos=reader.text("qos"),
        time_limit_s=_minutes(reader, "time_limit"),
        features=reader.text("features") or None,
        reservation=reader.text("resv_name") or None,
        licenses=reader.text("licenses") or None,
        std_out=reader.text("stdout_expanded") or reader.text("standard_output") or None,
        std_err=reader.text("stderr_expanded") or reader.text("standard_error") or None,
        work_dir=reader.text("current_working_directory") or None,
        user_id=reader.number("user_id"),
        array_job_id=reader.number("array_job_id") or None,
        array_task_id=reader.number("array_task_id"),
    )


def _minutes(reader: _Reader, key: str) -> int | None:
    """A limit Slurm gives in minutes (null, a number or a number object), in seconds."""
    minutes = reader.number(key)
    return minutes * 60 if minutes is not None and minutes > 0 else None


def _tres_gres(reader: _Reader, entries: Any, per: str) -> tuple[GresItem, ...]:
    """sacct's `tres.requested`: [{"type": "gres", "name": "gpu:h100", "count": 1}, ...]."""
    if not isinstance(entries, list):
        return ()
    items = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("type") != "gres":
            continue
        name = entry.get("name")
        count = reader.number("tres.count", entry.get("count"), use_value=True)
        if not isinstance(name, str) or not name or count is None:
            continue
        item = parse_gres_item(f"{name}={count}", per=per)  # `gpu:h100` and its count, the TRES form
        if item is not None:
            items.append(item)
    return tuple(items)


def _parse_accounting_job(job_id: int, reader: _Reader) -> Job:
    """A sacct record: state/time/comment/tres are objects (dbv0.0.38 and v0.0.40+)."""
    record = reader.record
    state_obj = record.get("state") if isinstance(record.get("state"), Mapping) else {}
    try:
        state, flags = normalise_job_state(state_obj.get("current")) if state_obj.get(
            "current"
        ) is not None else (None, ())
    except ValueError:
        reader.bad("state.current", "expected a string or a list", state_obj.get("current"))
        state, flags = None, ()
    times = record.get("time") if isinstance(record.get("time"), Mapping) else {}
    comments = record.get("comment") if isinstance(record.get("comment"), Mapping) else {}
    tres = record.get("tres") if isinstance(record.get("tres"), Mapping) else {}
    try:
        exit_code, exit_signal = decode_exit_code(record.get("exit_code"))
    except ValueError:
        reader.bad("exit_code", "expected an exit-code object", record.get("exit_code"))
        exit_code = exit_signal = None
    reason = reader.text("state.reason", state_obj.get("reason"), use_value=True)
    user = record.get("user")
    return Job(
        job_id=job_id,
        name=reader.text("name"),
        user=user if isinstance(user, str) and user else None,
        state=state,
        state_flags=flags,
        state_reason=None if reason == "None" else reason,
        partition=reader.text("partition"),
        nodes=reader.text("nodes") if reader.text("nodes") != "None assigned" else None,
        gres=_tres_gres(reader, tres.get("requested"), "job"),
        admin_comment=reader.text("comment.administrator", comments.get("administrator"), use_value=True),
        comment=reader.text("comment.job", comments.get("job"), use_value=True),
        priority=reader.number("priority"),
        submit_time=reader.time("time.submission", times.get("submission"), use_value=True),
        start_time=reader.time("time.start", times.get("start"), use_value=True),
        end_time=reader.time("time.end", times.get("end"), use_value=True),
        exit_code=exit_code,
        exit_signal=exit_signal,
        restart_cnt=reader.number("restart_cnt"),
    )


def parse_node(record: Any, *, path: str = "node", strict: bool = False) -> Node:
    """One node of `scontrol --json show node` (23.02+) or `sinfo --json` (22.05)."""
    if not isinstance(record, dict):
        raise SlurmParseError(path, "expected an object", record)
    name = record.get("name")
    if not isinstance(name, str) or not name:
        raise SlurmParseError(f"{path}.name", "missing or not a string", name)
    reader = _Reader(record, path, strict)
    state: list[str] = [s.upper() for s in reader.strings("state")]
    for extra in reader.strings("state_flags"):  # 22.05 keeps flags apart
        if extra.upper() not in state:
            state.append(extra.upper())
    return Node(
        name=name,
        state=tuple(state),
        gres=parse_gres_list(reader.text("gres")),
        gres_used=parse_gres_list(reader.text("gres_used")),
        partitions=reader.strings("partitions"),
        features=reader.strings("active_features"),
        reason=reader.text("reason"),
        cpus=reader.number("cpus"),
        alloc_cpus=reader.number("alloc_cpus"),
        real_memory=reader.number("real_memory"),
        alloc_memory=reader.number("alloc_memory"),
        address=reader.text("address"),
    )
