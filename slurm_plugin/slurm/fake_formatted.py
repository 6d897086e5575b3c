"""The fake's formatted squeue (`squeue -h -O NAME:0SUFFIX,...`) and `squeue --only-job-state`,
printed as 22.05/24.11 print them (tests/data/slurm/squeue_*_formatted.txt): a field at full
width, then its suffix; a record ends with a newline. Fields the fake does not keep print as
squeue prints an unset value."""
from __future__ import annotations

from datetime import datetime, timezone

from slurm_plugin.slurm.fake_records import FakeJob, UnsupportedCommand
from slurm_plugin.slurm.gres import expand_hostlist

FINISHED = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
            "OUT_OF_MEMORY"}


def _time(seconds: int) -> str:
    if not seconds:
        return "N/A"
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def _limit(minutes: int | None) -> str:
    if minutes is None:
        return "UNLIMITED"
    days, rest = divmod(minutes * 60, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def _value(job: FakeJob, name: str) -> str:
    text = lambda v: v or "(null)"  # noqa: E731
    values = {
        "jobid": str(job.job_id), "state": job.state,
        "reason": job.state_reason or "None", "prioritylong": str(job.priority),
        "nodelist": job.nodes, "numnodes": str(max(1, len(expand_hostlist(job.nodes)))),
        "partition": job.partition, "qos": text(job.qos), "reservation": text(job.resv_name),
        "feature": text(job.features), "tres-per-node": text(job.tres_per_node),
        "tres-per-job": text(job.tres_per_job), "tres-per-task": text(job.tres_per_task),
        "tres-per-socket": "(null)", "admin_comment": text(job.admin_comment), "username": job.user,
        "userid": "(null)",  # the fake keeps no uid (its JSON has none either)
        "submittime": _time(job.submit_time), "starttime": _time(job.start_time),
        "endtime": _time(job.end_time), "timelimit": _limit(job.time_limit_min),
        "restartcnt": str(job.restart_cnt), "requeue": str(int(job.requeue)), "reqnodes": job.required_nodes,
        "excnodes": job.excluded_nodes, "arrayjobid": str(job.job_id), "arraytaskid": "N/A",
        "exit_code": f"{job.exit_code}:0", "batchhost": text(job.batch_host), "licenses": text(job.licenses),
        "workdir": "(null)", "stdout": "(null)",
        "stderr": "(null)", "comment": text(job.comment), "name": job.name,
    }
    try:
        return values[name.lower()]
    except KeyError:
        raise UnsupportedCommand(f"the fake squeue does not print -O {name}") from None


def formatted(jobs: list[FakeJob], spec: str, ids: set[int] | None) -> str:
    """`squeue --noheader --Format=spec`: jobs not finished, or those of ``ids`` in any state."""
    fields = []
    for token in spec.split(","):
        name, sep, rest = token.partition(":")
        if not sep or not rest.startswith("0"):
            raise UnsupportedCommand(f"the fake squeue prints only full-width fields, not {token!r}")
        fields.append((name, rest[1:]))
    out = []
    for job in jobs:
        if (job.job_id not in ids) if ids is not None else job.state in FINISHED:
            continue
        out.append("".join(_value(job, name) + suffix for name, suffix in fields) + "\n")
    return "".join(out)


def job_states(jobs: list[FakeJob]) -> str:
    """`squeue --only-job-state --noheader --format=%A %T`."""
    return "".join(f"{job.job_id} {job.state}\n" for job in jobs)
