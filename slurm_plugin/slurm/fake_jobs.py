"""The Slurm fake's commands that change jobs (:mod:`slurm_plugin.slurm.fake`): scontrol
update, hold, release, top, requeue and requeuehold, and scancel --signal, with Slurm's own
error texts (recorded from 22.05)."""
from __future__ import annotations

from typing import Any

from slurm_plugin.slurm.fake_records import FakeJob, UnsupportedCommand
from slurm_plugin.slurm.gres import expand_hostlist

__all__ = ["FakeJobCommands"]

_UPDATE_KEYS = {
    "AdminComment": "admin_comment",
    "Comment": "comment",
    "Priority": "priority",
    "Nice": "nice",
    "ExcNodeList": "excluded_nodes",
    "TresPerNode": "tres_per_node",
    "Gres": "tres_per_node",
    "TresPerJob": "tres_per_job",
    "TresPerTask": "tres_per_task",
    "Name": "name",
    "Partition": "partition",
    "StartTime": "begin_time",
}


def _kinds(tres: str | None) -> set[str]:
    """The GRES names in a TRES request (`gres:shard:2` -> {"shard"}, `gpu:1` -> {"gpu"})."""
    names = set()
    for item in (tres or "").split(","):
        parts = item.replace("gres/", "").replace("gres:", "", 1).split(":")
        if parts and parts[0]:
            names.add(parts[0])
    return names


class FakeJobCommands:
    """Changes ``jobs`` (shared with the fake) the way slurmctld does; ``modern``: Slurm
    23.11+ (TRES written gres/...). ``signals`` records what scancel --signal sent."""

    def __init__(self, jobs: dict[int, FakeJob], modern: bool, replaces_gres: bool = True,
                 priority_type: str = "basic") -> None:
        self.jobs = jobs
        self.priority_type = priority_type  # "basic" | "multifactor" (priority computed on its period)
        self.modern = modern
        self.replaces_gres = replaces_gres  # False: 22.05 (a shard job's GRES cannot become gpu)
        self._saved_priority: dict[int, int] = {}
        self.signals: list[tuple[int, str, bool]] = []  # (job, signal, batch only) sent by scancel --signal

    def find(self, text: str) -> FakeJob | None:
        return self.jobs.get(int(text)) if text.isdigit() else None

    def signal(self, rest: list[str]) -> tuple[int, str, str]:
        """`scancel --signal=SIG [--batch] ID`; a plain scancel (a cancel) is not modelled."""
        signal = next((a.split("=", 1)[1] for a in rest if a.startswith("--signal=")), None)
        if signal is None:
            raise UnsupportedCommand(f"FakeSlurm models only scancel --signal, not {rest!r} (never cancel)")
        job = self.find(rest[-1])
        if job is None:
            return 1, "", f"scancel: error: Kill job error on job id {rest[-1]}: Invalid job id specified\n"
        if job.state != "RUNNING":
            return 1, "", f"scancel: error: Kill job error on job id {job.job_id}: Job is no longer pending execution\n"
        self.signals.append((job.job_id, signal, "--batch" in rest))
        return 0, "", ""

    def update(self, pairs: list[str]) -> tuple[int, str, str]:
        if not pairs or not pairs[0].startswith("JobId="):
            raise UnsupportedCommand(f"FakeSlurm only updates jobs by JobId=, got {pairs!r}")
        job_text = pairs[0].partition("=")[2]
        job = self.find(job_text)
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
                changes.update(priority=int(value), direct_set=True, nice=0)  # as slurmctld: nice reset
            elif attr == "nice":
                try:
                    changes.update(self._nice(job, int(value)))
                except ValueError:
                    return 1, "", f"Invalid nice value: {value}\nRequest aborted\n"
            elif attr.startswith("tres_per_") and value and not value.startswith("gres"):
                if not self.replaces_gres and key == "Gres" and _kinds(job.tres_per_node) != _kinds(value):
                    # 22.05 merges the new GRES into the job's request: shard and gpu together
                    return 1, "", f"Invalid generic resource (gres) specification for job {job.job_id}\n"
                changes[attr] = ("gres/" if self.modern else "gres:") + value
            else:
                changes[attr] = value
        for attr, value in changes.items():
            setattr(job, attr, value)
        _strand_if_pinned_away(job)
        return 0, "", ""

    def job_verb(self, verb: str, job_text: str) -> tuple[int, str, str]:
        job = self.find(job_text)
        if job is None:
            label = "slurm_suspend error" if verb in ("hold", "release") else f"slurm_{verb} error"
            return 1, "", f"Invalid job id specified for job {job_text}\n{label}: Invalid job id specified\n"
        if verb in ("hold", "release", "top") and job.state != "PENDING":
            return 1, "", f"Job is no longer pending execution for job {job.job_id}\n"
        if verb == "hold":
            self._saved_priority[job.job_id] = job.priority or self._saved_priority.get(job.job_id, 1)
            job.priority, job.state_reason = 0, "JobHeldUser"
        elif verb == "release":
            if job.priority == 0:  # Slurm computes its priority again: an administrator one ends
                saved = self._saved_priority.pop(job.job_id, 4294901000)
                job.priority = self.computed(job) if self.priority_type == "multifactor" else saved
                job.direct_set, job.state_reason = False, "None"
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
        _strand_if_pinned_away(job)
        return 0, "", ""

    def _nice(self, job: FakeJob, nice: int) -> dict[str, Any]:
        """`Nice=N` as slurmctld takes it: ignored under an administrator priority; under
        priority/basic the priority moves at once, under multifactor when next computed."""
        if job.direct_set and job.priority != 0:
            return {}
        if self.priority_type == "basic":
            return {"nice": nice, "priority": max(job.priority + job.nice - nice, 2)}
        return {"nice": nice}

    @staticmethod
    def computed(job: FakeJob) -> int:
        """priority/multifactor's priority: its factors' sum less its nice, at least 1."""
        return max(1, (job.priority if job.factors is None else job.factors) - job.nice)

    def recompute(self) -> None:
        """priority/multifactor's periodic pass: every job without an administrator priority
        (held ones stay held) gets the priority its factors and nice give."""
        for job in self.jobs.values():
            if job.state in ("PENDING", "RUNNING") and job.priority != 0 and not job.direct_set:
                job.priority = self.computed(job)


def _strand_if_pinned_away(job: FakeJob) -> None:
    """As slurmctld: a pending job pinned (-w) to a node it also excludes waits for good."""
    if (job.state == "PENDING" and job.priority != 0
            and set(expand_hostlist(job.required_nodes)) & set(expand_hostlist(job.excluded_nodes))):
        job.state_reason = "BadConstraints"

