"""A stateful fake of squeue/sinfo/sacct/scontrol for unit tests.

`FakeSlurm` is an executor (`SlurmRunner(executor=FakeSlurm())`): it keeps jobs and
nodes, answers the commands the adapter runs in the JSON of Slurm 22.05 (v0.0.38) or
23.11 (v0.0.40), changes state on update/hold/release/requeue the way slurmctld does,
prints Slurm's own error texts (recorded from 22.05) and refuses any other command
with `UnsupportedCommand`, so a test cannot silently depend on something unfaked.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_plugin.slurm.runner import CommandResult

FAKE_EPOCH = 1_700_000_000


class UnsupportedCommand(AssertionError):
    """The fake was asked to run a command it does not model."""


@dataclass
class FakeJob:
    job_id: int
    name: str = "job.sh"
    user: str = "root"
    state: str = "PENDING"
    state_reason: str = "Priority"
    partition: str = "gpu"
    nodes: str = ""
    tres_per_node: str = ""
    tres_per_job: str = ""
    tres_per_task: str = ""
    gres_detail: list[str] = field(default_factory=list)
    admin_comment: str = ""
    comment: str = ""
    priority: int = 4294901000
    submit_time: int = FAKE_EPOCH
    start_time: int = 0
    end_time: int = 0
    exit_code: int = 0  # return code (not a wait status)
    excluded_nodes: str = ""
    required_nodes: str = ""
    restart_cnt: int = 0
    batch_host: str = ""
    exclusive: bool = False
    script: str = "#!/bin/sh\nsleep 30\n"
    requeue: bool = True  # Slurm's JobRequeue=1 default
    qos: str = ""
    time_limit_min: int | None = None  # None: unlimited (22.05 prints null)


@dataclass
class FakeNode:
    name: str
    state: str = "IDLE"
    gres: str = "gpu:h100:2,shard:h100:16"
    gres_used: str = "gpu:h100:0(IDX:N/A),shard:h100:0(IDX:N/A)"


_UPDATE_KEYS = {
    "AdminComment": "admin_comment",
    "Comment": "comment",
    "Priority": "priority",
    "ExcNodeList": "excluded_nodes",
    "TresPerNode": "tres_per_node",
    "Gres": "tres_per_node",
    "TresPerJob": "tres_per_job",
    "TresPerTask": "tres_per_task",
    "Name": "name",
    "Partition": "partition",
    "StartTime": "begin_time",
}


def _nv(number: int, *, set_: bool = True) -> dict[str, Any]:
    return {"set": set_, "infinite": False, "number": number}


class FakeSlurm:
    """Jobs and nodes in memory, answered as Slurm `release` ("22.05.8" or "23.11.4")."""

    def __init__(self, release: str = "22.05.8", *, accounting: bool = False) -> None:
        self.release = release
        major, minor, _ = (int(p) for p in release.split("."))
        self.modern = (major, minor) >= (23, 11)
        self.scontrol_json = (major, minor) >= (23, 2)
        self.accounting = accounting
        self.jobs: dict[int, FakeJob] = {}
        self.nodes: dict[str, FakeNode] = {"node1": FakeNode("node1"), "node2": FakeNode("node2")}
        self.calls: list[list[str]] = []
        self.envs: list[dict[str, str]] = []
        self._next_id = 1
        self._saved_priority: dict[int, int] = {}
        self.signals: list[tuple[int, str, bool]] = []  # (job, signal, batch only) sent by scancel --signal

    # ------------------------------------------------------------ test set-up

    def submit(self, **fields: Any) -> int:
        """Add a job; `gres="gres:gpu:1"` is a shortcut for tres_per_node."""
        job_id = fields.pop("job_id", self._next_id)
        self._next_id = max(self._next_id, job_id + 1)
        gres = fields.pop("gres", None)
        if gres is not None:
            fields["tres_per_node"] = gres
        job = FakeJob(job_id=job_id, **fields)
        if job.state == "RUNNING" and not job.start_time:
            job.start_time = job.submit_time + 1
        self.jobs[job_id] = job
        return job_id

    # ------------------------------------------------------------ executor

    def __call__(self, args: Sequence[str], env: Mapping[str, str], timeout: float) -> CommandResult:
        argv = list(args)
        self.calls.append(argv)
        self.envs.append(dict(env))
        code, out, err = self._dispatch(argv)
        return CommandResult(tuple(argv), code, out, err)

    def _dispatch(self, argv: list[str]) -> tuple[int, str, str]:
        command, rest = argv[0], argv[1:]
        if command == "squeue" and "--nodelist" in rest and "--format" in rest:
            node = rest[rest.index("--nodelist") + 1]
            states = {x.upper() for x in rest[rest.index("--states") + 1].split(",")}
            from slurm_plugin.slurm.gres import expand_hostlist

            ids = [j.job_id for j in self.jobs.values() if j.state in states and node in expand_hostlist(j.nodes)]
            return 0, "".join(f"{i}\n" for i in ids), ""
        if command == "squeue" and "--json" in rest:
            return 0, self._dump({"jobs": [self._job_json(j) for j in self.jobs.values()]}), ""
        if command == "sinfo" and rest == ["--json"]:
            return 0, self._dump({"nodes": [self._node_json(n) for n in self.nodes.values()]}), ""
        if command == "scancel":
            return self._signal(rest)
        if command == "sacct":
            if not self.accounting:
                return 1, "", "Slurm accounting storage is disabled\n"
            raise UnsupportedCommand("FakeSlurm does not model sacct records; give it a sample")
        if command != "scontrol":
            raise UnsupportedCommand(f"FakeSlurm does not model {argv!r}")
        if rest == ["--version"]:
            return 0, f"slurm {self.release}\n", ""
        if rest[:1] == ["--json"]:
            if not self.scontrol_json:
                return 1, "", "scontrol: unrecognized option '--json'\nTry \"scontrol --help\" for more information\n"
            return self._show_json(rest[1:])
        verb = rest[0] if rest else ""
        if verb == "update":
            return self._update(rest[1:])
        if verb in ("hold", "release", "requeue", "requeuehold", "top") and len(rest) == 2:
            return self._job_verb(verb, rest[1])
        if verb == "write" and len(rest) == 4 and rest[1] == "batch_script" and rest[3] == "-":
            job = self._find(rest[2])
            if job is None:  # 22.05 exits 0 here
                return 0, "", "job script retrieval failed: Invalid job id specified\n"
            return 0, job.script, ""
        raise UnsupportedCommand(f"FakeSlurm does not model {argv!r}")

    # ------------------------------------------------------------ commands

    def _signal(self, rest: list[str]) -> tuple[int, str, str]:
        """`scancel --signal=SIG [--batch] ID`; a plain scancel (a cancel) is not modelled."""
        signal = next((a.split("=", 1)[1] for a in rest if a.startswith("--signal=")), None)
        if signal is None:
            raise UnsupportedCommand(f"FakeSlurm models only scancel --signal, not {rest!r} (never cancel)")
        job = self._find(rest[-1])
        if job is None:
            return 1, "", f"scancel: error: Kill job error on job id {rest[-1]}: Invalid job id specified\n"
        if job.state != "RUNNING":
            return 1, "", f"scancel: error: Kill job error on job id {job.job_id}: Job is no longer pending execution\n"
        self.signals.append((job.job_id, signal, "--batch" in rest))
        return 0, "", ""

    def _find(self, text: str) -> FakeJob | None:
        return self.jobs.get(int(text)) if text.isdigit() else None

    def _show_json(self, rest: list[str]) -> tuple[int, str, str]:
        if rest[:2] == ["show", "node"]:
            return 0, self._dump({"nodes": [self._node_json(n) for n in self.nodes.values()]}), ""
        if rest[:2] == ["show", "job"]:
            if len(rest) == 3:
                job = self._find(rest[2])
                if job is None:
                    return 1, "", "slurm_load_jobs error: Invalid job id specified\n"
                return 0, self._dump({"jobs": [self._job_json(job)]}), ""
            return 0, self._dump({"jobs": [self._job_json(j) for j in self.jobs.values()]}), ""
        raise UnsupportedCommand(f"FakeSlurm does not model scontrol --json {rest!r}")

    def _update(self, pairs: list[str]) -> tuple[int, str, str]:
        if not pairs or not pairs[0].startswith("JobId="):
            raise UnsupportedCommand(f"FakeSlurm only updates jobs by JobId=, got {pairs!r}")
        job_text = pairs[0].partition("=")[2]
        job = self._find(job_text)
        if job is None:
            return 1, "", f"Invalid job id specified for job {job_text}\n"
        changes: dict[str, Any] = {}
        for pair in pairs[1:]:
            key, sep, value = pair.partition("=")
            if not sep or key not in _UPDATE_KEYS:
                return 1, "", f"Update of this parameter is not supported: {pair}\nRequest aborted\n"
            attr = _UPDATE_KEYS[key]
            if attr == "begin_time":  # eligible at once: a pending job waiting on BeginTime may start
                if value != "now":
                    return 1, "", f"FakeSlurm only understands StartTime=now, got {value}\nRequest aborted\n"
                if job.state != "PENDING":
                    return 1, "", f"Job is no longer pending execution for job {job.job_id}\n"
                if job.state_reason == "BeginTime":
                    changes["state_reason"] = "None"
                continue
            if attr == "priority":
                if not value.isdigit():
                    return 1, "", f"Invalid Priority value: {value}\nRequest aborted\n"
                changes[attr] = int(value)
            elif attr.startswith("tres_per_") and value and not value.startswith("gres"):
                changes[attr] = ("gres/" if self.modern else "gres:") + value
            else:
                changes[attr] = value
        for attr, value in changes.items():
            setattr(job, attr, value)
        return 0, "", ""

    def _job_verb(self, verb: str, job_text: str) -> tuple[int, str, str]:
        job = self._find(job_text)
        if job is None:
            label = "slurm_suspend error" if verb in ("hold", "release") else f"slurm_{verb} error"
            return 1, "", f"Invalid job id specified for job {job_text}\n{label}: Invalid job id specified\n"
        if verb in ("hold", "release", "top") and job.state != "PENDING":
            return 1, "", f"Job is no longer pending execution for job {job.job_id}\n"
        if verb == "hold":
            self._saved_priority[job.job_id] = job.priority or self._saved_priority.get(job.job_id, 1)
            job.priority, job.state_reason = 0, "JobHeldUser"
        elif verb == "release":
            if job.priority == 0:
                job.priority = self._saved_priority.pop(job.job_id, 4294901000)
                job.state_reason = "None"
        elif verb == "top":
            job.priority = max((j.priority for j in self.jobs.values()), default=1) + 1
        else:  # requeue, requeuehold
            if job.state == "PENDING":
                return 1, "", f"Job is pending execution for job {job.job_id}\n"
            job.state, job.state_reason = "PENDING", "BeginTime"
            job.restart_cnt += 1
            job.nodes, job.batch_host, job.gres_detail = "", "", []
            if verb == "requeuehold":
                self._saved_priority[job.job_id] = job.priority
                job.priority, job.state_reason = 0, "JobHeldUser"
        return 0, "", ""

    # ------------------------------------------------------------ rendering

    def _meta(self) -> dict[str, Any]:
        major, minor, micro = self.release.split(".")
        if self.modern:
            return {
                "plugin": {"type": "openapi/slurmctld", "name": "Slurm OpenAPI slurmctld",
                           "data_parser": "data_parser/v0.0.40", "accounting_storage": ""},
                "client": {"source": "fake", "user": "root", "group": "root"},
                "command": [],
                "slurm": {"version": {"major": major, "micro": micro, "minor": minor},
                          "release": self.release, "cluster": "fake"},
            }
        return {
            "plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
            "Slurm": {"version": {"major": int(major), "micro": int(micro), "minor": int(minor)},
                      "release": self.release},
        }

    def _dump(self, body: dict[str, Any]) -> str:
        doc: dict[str, Any] = {"meta": self._meta(), "errors": []}
        if self.modern:
            doc["warnings"] = []
        doc.update(body)
        return json.dumps(doc, indent=2)

    def _tres(self, text: str) -> str:
        if not text:
            return ""
        if self.modern:
            return text.replace("gres:", "gres/", 1) if text.startswith("gres:") else text
        return text.replace("gres/", "gres:", 1) if text.startswith("gres/") else text

    def _job_json(self, job: FakeJob) -> dict[str, Any]:
        record: dict[str, Any] = {
            "job_id": job.job_id,
            "name": job.name,
            "user_name": job.user,
            "state_reason": job.state_reason,
            "partition": job.partition,
            "nodes": job.nodes,
            "tres_per_node": self._tres(job.tres_per_node),
            "tres_per_job": self._tres(job.tres_per_job),
            "tres_per_task": self._tres(job.tres_per_task),
            "tres_per_socket": "",
            "gres_detail": list(job.gres_detail),
            "admin_comment": job.admin_comment,
            "comment": job.comment,
            "excluded_nodes": job.excluded_nodes,
            "required_nodes": job.required_nodes,
            "restart_cnt": job.restart_cnt,
            "batch_host": job.batch_host,
            "requeue": job.requeue,
            "qos": job.qos,
            "some_future_field": {"ignored": True},
        }
        if self.modern:
            record.update(
                job_state=[job.state],
                priority=_nv(job.priority),
                submit_time=_nv(job.submit_time),
                start_time=_nv(job.start_time),
                end_time=_nv(job.end_time),
                exit_code={"status": ["SUCCESS" if job.exit_code == 0 else "ERROR"],
                           "return_code": _nv(job.exit_code), "signal": {"id": _nv(0, set_=False), "name": ""}},
                hold=job.priority == 0 and job.state == "PENDING",
                exclusive=["true"] if job.exclusive else [],
                shared=[],
                node_count=_nv(1),
                time_limit=_nv(0, set_=False) if job.time_limit_min is None else _nv(job.time_limit_min),
            )
        else:
            record.update(
                job_state=job.state,
                priority=job.priority,
                submit_time=job.submit_time,
                start_time=job.start_time,
                end_time=job.end_time,
                exit_code=job.exit_code << 8,
                shared="none" if job.exclusive else None,
                node_count=1,
                time_limit=job.time_limit_min,
            )
        return record

    def _node_json(self, node: FakeNode) -> dict[str, Any]:
        record: dict[str, Any] = {"name": node.name, "gres": node.gres, "gres_used": node.gres_used,
                                  "partitions": ["gpu"], "cpus": 8, "alloc_cpus": 0, "reason": ""}
        if self.modern:
            record["state"] = node.state.upper().split("+")
        else:
            base, *flags = node.state.split("+")
            record["state"] = base.lower()
            record["state_flags"] = [f.upper() for f in flags]
        return record
