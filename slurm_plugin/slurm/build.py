"""Pure builders of Slurm command lines (argv lists, never shell strings).

Every value a person or a job could have written (comments, names) travels as one
argv element, so nothing is split or interpreted by a shell. Builders check what they
can and raise ValueError naming the bad argument.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from slurm_plugin.slurm.model import SlurmVersion

#: `scontrol update job` keys this project uses; others are refused to catch typos early.
UPDATE_FIELDS = frozenset(
    {
        "AdminComment",
        "Comment",
        "Priority",
        "Nice",
        "ExcNodeList",
        "ReqNodeList",
        "Gres",
        "TresPerNode",
        "TresPerJob",
        "TresPerTask",
        "Partition",
        "QOS",
        "TimeLimit",
        "Dependency",
        "StartTime",
        "Features",
        "Name",
        "Requeue",
    }
)
_KEY_RE = re.compile(r"^[A-Za-z][A-Za-z]*$")


def _job_id(job_id: int) -> str:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
        raise ValueError(f"job id must be a positive integer, got {job_id!r}")
    return str(job_id)


def _as_list(job_ids: int | Iterable[int]) -> list[int]:
    if isinstance(job_ids, Iterable) and not isinstance(job_ids, (str, bytes)):
        return list(job_ids)
    return [job_ids]  # type: ignore[list-item]  # checked by _job_id


def _job_ids(job_ids: int | Iterable[int]) -> str:
    ids = [_job_id(j) for j in _as_list(job_ids)]
    if not ids:
        raise ValueError("at least one job id is needed")
    return ",".join(ids)


def version_args() -> list[str]:
    return ["scontrol", "--version"]


def squeue_args(*, all_partitions: bool = True) -> list[str]:
    """Every job slurmctld knows, finished ones included (until MinJobAge).

    22.05 and 23.02 ignore filters with --json (they list everything); later releases
    honour `--states=all`, so it is passed for the same result everywhere.
    """
    args = ["squeue", "--json", "--states=all"]
    if all_partitions:
        args.append("--all")
    return args


def active_jobs_args() -> list[str]:
    """The jobs not finished yet (squeue's default states) as JSON: only where honoured."""
    return ["squeue", "--json", "--all"]


def jobs_by_id_args(job_ids: Iterable[int]) -> list[str]:
    """These jobs in whatever state, finished ones included (until MinJobAge), as JSON."""
    return ["squeue", "--json", "--all", "--states=all", f"--jobs={_job_ids(job_ids)}"]


def formatted_jobs_args(spec: str, job_ids: Iterable[int] | None = None) -> list[str]:
    """The queue as formatted text (`formatted.format_spec`): the jobs not finished yet (squeue's
    default states), or the jobs in ``job_ids`` in whatever state. Formatted output honours the
    filters on every release (22.05's JSON does not); run it with TZ=UTC (`formatted`)."""
    args = ["squeue", "--noheader", "--all", f"--Format={spec}"]
    if job_ids is not None:
        args += ["--states=all", f"--jobs={_job_ids(job_ids)}"]
    return args


def job_states_args() -> list[str]:
    """`squeue --only-job-state` (23.11+): every job's id and state from slurmctld's job-state
    cache (RPC REQUEST_JOB_STATE, no job lock, no records packed), one `ID STATE` a line. Only
    job, state, cluster and printing options go with it (`--all` is refused: "only works alone")."""
    return ["squeue", "--only-job-state", "--noheader", "--format=%A %T"]


HOLDING_STATES = ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "RESIZING")


def node_jobs_args(node: str) -> list[str]:
    """Ids of the jobs that hold ``node`` now, as plain text (one unique id per line).

    Text, not JSON: 22.05 and 23.02 ignore filters with --json, and a node agent asks this
    every few seconds; here slurmctld sends only that node's jobs."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", node):
        raise ValueError(f"not a node name: {node!r}")
    return ["squeue", "--noheader", "--all", "--nodelist", node,
            "--states", ",".join(s.lower() for s in HOLDING_STATES), "--format", "%A"]


def nice_args(job_id: int) -> list[str]:
    """One job's nice as plain text (22.05's JSON leaves it null)."""
    return ["squeue", "--noheader", "--jobs", _job_id(job_id), "--format", "%y"]


def show_job_args(job_id: int | None, version: SlurmVersion | None) -> list[str]:
    """One job (or all) as JSON: `scontrol --json show job` from 23.02, else squeue."""
    if version is not None and version.has_scontrol_json:
        args = ["scontrol", "--json", "show", "job"]
        if job_id is not None:
            args.append(_job_id(job_id))
        return args
    return squeue_args()


def show_job_detail_args(job_id: int) -> list[str]:
    """One job as text with its allocation's lines (`scontrol -d show job ID`: 22.05's read
    by id of a running job's GPU indexes, `show_job_text`)."""
    return ["scontrol", "-d", "show", "job", _job_id(job_id)]


def show_nodes_args(version: SlurmVersion | None) -> list[str]:
    """Nodes as JSON: `scontrol --json show node` from 23.02, `sinfo --json` on 22.05."""
    if version is not None and version.has_scontrol_json:
        return ["scontrol", "--json", "show", "node"]
    return ["sinfo", "--json"]


def sacct_args(
    job_ids: Iterable[int] | None = None,
    *,
    since: datetime | str | None = None,
    all_users: bool = True,
) -> list[str]:
    """Accounting records (needs slurmdbd): whole jobs only (`-X`)."""
    args = ["sacct", "--json", "-X"]
    if all_users:
        args.append("--allusers")
    if job_ids is not None:
        args += ["--jobs", _job_ids(job_ids)]
    if since is not None:
        when = since.strftime("%Y-%m-%dT%H:%M:%S") if isinstance(since, datetime) else since
        if not re.match(r"^[0-9A-Za-z:\-+T]+$", when):
            raise ValueError(f"since must be a Slurm time like 2024-01-31T12:00:00, got {when!r}")
        args += ["--starttime", when]
    return args


def format_update_value(key: str, value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple, set, frozenset)):
        text = ",".join(str(v) for v in value)
    else:
        text = "" if value is None else str(value)
    if "\n" in text or "\r" in text or "\0" in text:
        raise ValueError(f"{key} must be one line without NUL, got {text!r}")
    return text


def update_job_args(job_id: int, fields: Mapping[str, object]) -> list[str]:
    """`scontrol update JobId=ID Key=Value ...`; each pair is one argv element.

    An empty value (None, "", []) clears the field, as scontrol does with `Key=`.
    """
    if not fields:
        raise ValueError("nothing to update: give at least one field")
    args = ["scontrol", "update", f"JobId={_job_id(job_id)}"]
    for key, value in fields.items():
        if not _KEY_RE.match(key) or key not in UPDATE_FIELDS:
            raise ValueError(
                f"unknown job field {key!r} for scontrol update; known: {', '.join(sorted(UPDATE_FIELDS))}"
            )
        args.append(f"{key}={format_update_value(key, value)}")
    return args


def requeue_args(job_ids: int | Sequence[int], *, hold: bool = False) -> list[str]:
    """`scontrol requeue ID` (back to pending) or `requeuehold` (pending and held)."""
    return ["scontrol", "requeuehold" if hold else "requeue", _job_ids(job_ids)]


_SIGNAL_NAME = re.compile(r"^(?:SIG)?[A-Z0-9+]+$")


def signal_args(job_id: int, signal: str, *, batch: bool = True) -> list[str]:
    """`scancel --signal=SIG --batch ID`: send a signal (a checkpoint request), not a cancel.

    `batch`: to the batch shell only, as a job's `--signal=B:SIG@T` asks."""
    name = signal.strip().upper()
    if not _SIGNAL_NAME.match(name):
        raise ValueError(f"signal {signal!r}: give a name like USR1 or a number like 10")
    return ["scancel", f"--signal={name}", *(["--batch"] if batch else []), _job_id(job_id)]


def hold_args(job_ids: int | Sequence[int]) -> list[str]:
    return ["scontrol", "hold", _job_ids(job_ids)]


def release_args(job_ids: int | Sequence[int]) -> list[str]:
    return ["scontrol", "release", _job_ids(job_ids)]


def top_args(job_ids: int | Sequence[int]) -> list[str]:
    """`scontrol top ID`: before the user's other pending jobs (needs PriorityType/multifactor)."""
    return ["scontrol", "top", _job_ids(job_ids)]


def batch_script_args(job_id: int) -> list[str]:
    """`scontrol write batch_script ID -`: the script on stdout."""
    return ["scontrol", "write", "batch_script", _job_id(job_id), "-"]
