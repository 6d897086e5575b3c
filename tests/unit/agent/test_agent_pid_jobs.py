"""GPU processes mapped to Slurm jobs by pid: the cgroup parsers on recorded /proc/PID/cgroup
files of cgroup v1 and v2 Slurm nodes, and the environment's trust rules."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_plugin.agent.pid_jobs import (CGROUP, ENVIRON, CgroupConflict, PidJobs, job_of_cgroup,
                                         real_uid)

DATA = Path(__file__).resolve().parents[2] / "data" / "proc_cgroup"
EXPECTED = json.loads((DATA / "expected.json").read_text())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_cgroup_files(name):
    assert job_of_cgroup((DATA / name).read_text()) == EXPECTED[name]


def test_every_recorded_file_is_checked():
    assert sorted(p.name for p in DATA.glob("*.cgroup")) == sorted(EXPECTED)


def test_lines_naming_two_jobs_are_refused():
    with pytest.raises(CgroupConflict):
        job_of_cgroup("10:memory:/slurm/uid_1/job_5/step_0\n9:freezer:/slurm/uid_1/job_6/step_0\n")


def test_a_job_number_must_be_a_whole_path_component():
    assert job_of_cgroup("0::/system.slice/slurmstepd.scope/job_12x/step_0") is None
    assert job_of_cgroup("4:memory:/notslurm/uid_1/job_5/step_0") is None


def _proc(tmp_path: Path, pid: int, cgroup: str, env: dict[str, str] | None, uid: int) -> None:
    d = tmp_path / str(pid)
    d.mkdir()
    (d / "cgroup").write_text(cgroup)
    if env is not None:
        (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
    (d / "status").write_text(f"Name:\tpython3\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\n")


def test_cgroup_first_then_the_environment_with_its_uid(tmp_path):
    login = "0::/user.slice/user-1000.slice/session-3.scope\n"
    _proc(tmp_path, 10, (DATA / "v2_task.cgroup").read_text(), {"SLURM_JOB_ID": "99"}, 1000)
    _proc(tmp_path, 11, login, {"SLURM_JOB_ID": "7"}, 1000)  # linuxproc node: environment
    _proc(tmp_path, 12, login, {"SLURM_JOB_ID": "7"}, 1001)  # another user claims job 7
    _proc(tmp_path, 13, login, {"SLURM_JOB_ID": "8"}, 1000)  # a job not on this node
    _proc(tmp_path, 14, login, {"PATH": "/bin"}, 1000)
    pids = PidJobs(str(tmp_path))
    jobs = {7: 1000, 4243: 1000, 9: None}
    assert pids.owner(10, jobs).job_id == 4243 and pids.owner(10, jobs).how == CGROUP
    assert (pids.owner(11, jobs).job_id, pids.owner(11, jobs).how) == (7, ENVIRON)
    assert pids.owner(12, jobs).job_id is None and "uid 1001" in pids.owner(12, jobs).how
    assert pids.owner(13, jobs).job_id is None
    assert pids.owner(14, jobs).job_id is None
    assert pids.owner(15, jobs).job_id is None  # gone


def test_a_cgroup_of_another_job_outweighs_the_environment(tmp_path):
    _proc(tmp_path, 20, (DATA / "v1_task.cgroup").read_text(), {"SLURM_JOB_ID": "7"}, 1000)
    assert PidJobs(str(tmp_path)).owner(20, {7: 1000}).job_id == 4242  # not ours: counts for 7 never


def test_real_uid():
    assert real_uid("Name:\tx\nUid:\t1000\t0\t0\t0\n") == 1000 and real_uid("Name:\tx\n") is None
