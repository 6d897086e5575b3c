"""A stateful fake of squeue/sinfo/sacct/scontrol for unit tests.

`FakeSlurm` is an executor (`SlurmRunner(executor=FakeSlurm())`): it keeps jobs and
nodes, answers the commands the adapter runs in the JSON of Slurm 22.05 (v0.0.38) or
23.11 (v0.0.40), changes state on update/hold/release/requeue the way slurmctld does,
prints Slurm's own error texts (recorded from 22.05) and refuses any other command
with `UnsupportedCommand`, so a test cannot silently depend on something unfaked.

The pieces: :mod:`~slurm_plugin.slurm.fake_records` (jobs and nodes),
:mod:`~slurm_plugin.slurm.fake_jobs` (the commands that change jobs),
:mod:`~slurm_plugin.slurm.fake_json` (the JSON). This module routes each command.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slurm_plugin.slurm import fake_formatted, fake_show_text
from slurm_plugin.slurm.fake_jobs import FakeJobCommands
from slurm_plugin.slurm.fake_json import FakeJson
from slurm_plugin.slurm.fake_records import FAKE_EPOCH, FakeJob, FakeNode, UnsupportedCommand
from slurm_plugin.slurm.runner import CommandResult

__all__ = ["FAKE_EPOCH", "FakeJob", "FakeNode", "FakeSlurm", "UnsupportedCommand"]


class FakeSlurm:
    """Jobs and nodes in memory, answered as Slurm `release` ("22.05.8" or "23.11.4")."""

    def __init__(self, release: str = "22.05.8", *, accounting: bool = False, priority_type: str = "basic") -> None:
        self.release = release
        major, minor, _ = (int(p) for p in release.split("."))
        self.modern = (major, minor) >= (23, 11)
        self.scontrol_json = (major, minor) >= (23, 2)
        self.job_state_query = (major, minor) >= (23, 11)  # squeue --only-job-state
        self.accounting = accounting
        self.jobs: dict[int, FakeJob] = {}
        self.nodes: dict[str, FakeNode] = {"node1": FakeNode("node1"), "node2": FakeNode("node2")}
        self.reservations: dict[str, str] = {}  # name -> its nodes (a hostlist)
        self.licenses: dict[str, int] = {}  # name -> total
        self.qos_limits: dict[str, str] = {}  # QOS -> MaxTRESPerJob, e.g. "gres/shard=4" (needs accounting)
        self.calls: list[list[str]] = []
        self.envs: list[dict[str, str]] = []
        self._next_id = 1
        self._commands = FakeJobCommands(self.jobs, self.modern, replaces_gres=(major, minor) >= (23, 2),
                                          priority_type=priority_type)
        self._json = FakeJson(release, self.modern)

    @property
    def signals(self) -> list[tuple[int, str, bool]]:
        """(job, signal, batch only) sent by scancel --signal."""
        return self._commands.signals

    # ------------------------------------------------------------ test set-up

    def submit(self, **fields: Any) -> int:
        """Add a job; `gres="gres:gpu:1"` is a shortcut for tres_per_node."""
        job_id = fields.pop("job_id", self._next_id)
        self._next_id = max(self._next_id, job_id + 1)
        gres = fields.pop("gres", None)
        if gres is not None:
            fields["tres_per_node"] = gres
        job = FakeJob(job_id=job_id, **fields)
        if job.factors is None:
            job.factors = job.priority + job.nice
        if job.state == "RUNNING" and not job.start_time:
            job.start_time = job.submit_time + 1
        self.jobs[job_id] = job
        return job_id

    def recompute_priorities(self) -> None:
        """priority/multifactor's periodic pass (PriorityCalcPeriod)."""
        self._commands.recompute()

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
            return self._squeue_ids(rest)
        if command == "squeue" and rest[:2] == ["--noheader", "--jobs"] and rest[3:] == ["--format", "%y"]:
            job = self._commands.find(rest[2])
            if job is None:
                return 1, "", "slurm_load_jobs error: Invalid job id specified\n"
            return 0, f"{job.nice}\n", ""
        if command == "squeue" and rest[:2] == ["--noheader", "--all"] and rest[2].startswith("--Format="):
            return self._squeue_formatted(rest)
        if command == "squeue" and rest[:1] == ["--only-job-state"]:
            if not self.job_state_query:
                return 1, "", "squeue: unrecognized option '--only-job-state'\n"
            if rest != ["--only-job-state", "--noheader", "--format=%A %T"]:  # 26.05 refuses --all with it
                return 1, "", ("squeue: fatal: Option --only-job-state only works alone, with -j (--jobs) and/or -t "
                               "(--states) parameters, parameters for cluster/federation selection, and the printing "
                               "options.\n")
            return 0, fake_formatted.job_states(list(self.jobs.values())), ""
        if command == "squeue" and "--json" in rest:
            return 0, self._json.jobs(list(self.jobs.values())), ""
        if command == "sinfo" and rest == ["--json"]:
            return 0, self._json.nodes(list(self.nodes.values())), ""
        if command == "scancel":
            return self._commands.signal(rest)
        if command == "sacctmgr" and rest[:3] == ["-nP", "show", "qos"] and len(rest) == 5:
            if not self.accounting:
                return 1, "", "sacctmgr: error: Problem talking to the database: Connection refused\n"
            name = rest[3]
            return 0, (f"{name}|{self.qos_limits[name]}|\n" if name in self.qos_limits else ""), ""
        if command == "sacct":
            if not self.accounting:
                return 1, "", "Slurm accounting storage is disabled\n"
            raise UnsupportedCommand("FakeSlurm does not model sacct records; give it a sample")
        if command != "scontrol":
            raise UnsupportedCommand(f"FakeSlurm does not model {argv!r}")
        return self._scontrol(argv, rest)

    def _scontrol(self, argv: list[str], rest: list[str]) -> tuple[int, str, str]:
        if rest == ["--version"]:
            return 0, f"slurm {self.release}\n", ""
        if rest[:1] == ["--json"]:
            if not self.scontrol_json:
                return 1, "", "scontrol: unrecognized option '--json'\nTry \"scontrol --help\" for more information\n"
            return self._show_json(rest[1:])
        verb = rest[0] if rest else ""
        if rest[:3] == ["-d", "show", "job"] and len(rest) == 4:
            job = self._commands.find(rest[3])
            if job is None:
                return 1, "", "slurm_load_jobs error: Invalid job id specified\n"
            return 0, fake_show_text.show_job_detail(job), ""
        if rest[:2] == ["show", "reservation"] and len(rest) == 4 and rest[3] == "--oneliner":
            if rest[2] not in self.reservations:
                return 1, "", f"Reservation {rest[2]} not found\n"
            return 0, f"ReservationName={rest[2]} StartTime=2023-11-14T22:13:20 Nodes={self.reservations[rest[2]]} " \
                      f"NodeCnt=1 State=ACTIVE\n", ""
        if rest == ["show", "licenses", "--oneliner"]:
            return 0, "".join(f"LicenseName={n} Total={t} Used=0 Free={t} Reserved=0 Remote=no\n"
                              for n, t in self.licenses.items()), ""
        if verb == "update":
            return self._commands.update(rest[1:])
        if verb in ("hold", "release", "requeue", "requeuehold", "top") and len(rest) == 2:
            return self._commands.job_verb(verb, rest[1])
        if verb == "write" and len(rest) == 4 and rest[1] == "batch_script" and rest[3] == "-":
            job = self._commands.find(rest[2])
            if job is None:  # 22.05 exits 0 here
                return 0, "", "job script retrieval failed: Invalid job id specified\n"
            return 0, job.script, ""
        raise UnsupportedCommand(f"FakeSlurm does not model {argv!r}")

    # ------------------------------------------------------------ queries

    def _squeue_ids(self, rest: list[str]) -> tuple[int, str, str]:
        """`squeue --nodelist NODE --states S,.. --format %i`: the ids, one a line."""
        from slurm_plugin.slurm.gres import expand_hostlist

        node = rest[rest.index("--nodelist") + 1]
        states = {x.upper() for x in rest[rest.index("--states") + 1].split(",")}
        ids = [j.job_id for j in self.jobs.values() if j.state in states and node in expand_hostlist(j.nodes)]
        return 0, "".join(f"{i}\n" for i in ids), ""

    def _squeue_formatted(self, rest: list[str]) -> tuple[int, str, str]:
        """`squeue --noheader --all --Format=SPEC [--states=all --jobs=IDS]` (`fake_formatted`)."""
        spec = rest[2].removeprefix("--Format=")
        ids = None
        if rest[3:]:
            if rest[3] != "--states=all" or not rest[4].startswith("--jobs=") or len(rest) != 5:
                raise UnsupportedCommand(f"FakeSlurm does not model squeue {rest!r}")
            ids = {int(i) for i in rest[4].removeprefix("--jobs=").split(",")}
            if len(ids) == 1 and not ids & set(self.jobs):
                return 1, "", "slurm_load_jobs error: Invalid job id specified\n"
        return 0, fake_formatted.formatted(list(self.jobs.values()), spec, ids), ""

    def _show_json(self, rest: list[str]) -> tuple[int, str, str]:
        if rest[:2] == ["show", "node"]:
            return 0, self._json.nodes(list(self.nodes.values())), ""
        if rest[:2] == ["show", "job"]:
            if len(rest) == 3:
                job = self._commands.find(rest[2])
                if job is None:
                    return 1, "", "slurm_load_jobs error: Invalid job id specified\n"
                return 0, self._json.jobs([job]), ""
            return 0, self._json.jobs(list(self.jobs.values())), ""
        raise UnsupportedCommand(f"FakeSlurm does not model scontrol --json {rest!r}")
