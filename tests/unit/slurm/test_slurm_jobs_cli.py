"""`gpupack jobs` through click's CliRunner over a fake Slurm (both releases)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurm_plugin.cli.jobs_cmd import jobs, job_view
from slurm_plugin.slurm.fake import FakeSlurm
from slurm_plugin.slurm.model import Job
from slurm_plugin.slurm.runner import SlurmRunner


@pytest.fixture(params=["22.05.8", "23.11.4"])
def fake(request: pytest.FixtureRequest) -> FakeSlurm:
    slurm = FakeSlurm(request.param)
    slurm.submit(name="train", gres="gres:shard:2", state="RUNNING", nodes="node1",
                 admin_comment="gpupack: packed shard:2 est=7.6GiB src=history(5) fp=1a2b3c4d5e6f7a8b")
    slurm.submit(name="profile", gres="gres:gpu:1", state="COMPLETED",
                 admin_comment="site note | gpupack: exclusive reason=no-history fp=0f0e0d0c0b0a0908")
    slurm.submit(name="advised", gres="gres:gpu:1",
                 admin_comment="gpupack: advise packed shard:2 est=3.0GiB src=history(2)")
    slurm.submit(name='we"ird\nname', tres_per_job="gres:gpu:1", admin_comment="site only")
    return slurm


def invoke(fake: FakeSlurm, *args: str):
    return CliRunner().invoke(jobs, list(args), obj={"slurm_runner": SlurmRunner(executor=fake)})


def test_json_lists_every_job_with_its_decision(fake: FakeSlurm) -> None:
    result = invoke(fake, "--json")
    assert result.exit_code == 0, result.output
    views = json.loads(result.output)
    assert [(v["job_id"], v["decision"]) for v in views] == [
        (1, "packed"), (2, "exclusive"), (3, "untouched"), (4, "untouched")
    ]
    packed, exclusive, advised, plain = views
    assert packed["name"] == "train" and packed["state"] == "RUNNING"
    assert packed["gres"] == "shard:2" and packed["shards"] == 2
    assert packed["fingerprint"] == "1a2b3c4d5e6f7a8b"
    assert packed["admin_comment"].startswith("gpupack: packed")
    assert exclusive["reason"] == "no-history" and exclusive["state"] == "COMPLETED"
    assert advised["advised"] is True and advised["verdict"] == "packed"
    assert plain["gres"] == "gpu:1/job" and plain["reason"] is None
    for view in views:
        assert {"job_id", "name", "state", "decision", "gres", "admin_comment"} <= set(view)


def test_table(fake: FakeSlurm) -> None:
    result = invoke(fake)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["JOBID", "NAME", "USER", "STATE", "DECISION", "GRES", "DETAIL", "NODES"]
    assert len(lines) == 5
    assert "packed" in lines[1] and "shard:2" in lines[1] and "node1" in lines[1]
    assert "reason=no-history" in lines[2]
    assert "advised:packed" in lines[3]
    assert 'we"ird?name' in lines[4]  # a newline in a name does not break the table
    column = lines[0].index("DECISION")
    assert [line[column:].split()[0] for line in lines[1:]] == ["packed", "exclusive", "untouched", "untouched"]


def test_no_jobs() -> None:
    result = invoke(FakeSlurm())
    assert result.exit_code == 0 and result.output == "No jobs.\n"
    assert json.loads(invoke(FakeSlurm(), "--json").output) == []


def separate_stderr() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        return CliRunner()  # click >= 8.2 keeps stderr apart anyway


def test_all_without_accounting_warns_and_goes_on(fake: FakeSlurm) -> None:
    result = separate_stderr().invoke(
        jobs, ["--all", "--json"], obj={"slurm_runner": SlurmRunner(executor=fake)}
    )
    assert result.exit_code == 0
    assert len(json.loads(result.stdout)) == 4
    assert "Warning: no accounting history (Slurm accounting storage is disabled)" in result.stderr


def test_slurm_errors_become_one_error_line() -> None:
    def broken(args, env, timeout):
        from slurm_plugin.slurm.runner import CommandResult
        return CommandResult(tuple(args), 1, "", "squeue: error: Unable to contact slurm controller (connect failure)\n")

    result = CliRunner().invoke(jobs, [], obj={"slurm_runner": SlurmRunner(executor=broken)})
    assert result.exit_code == 1
    assert result.output.startswith("Error: `squeue --json --states=all --all` failed (exit 1): ")
    assert "Check that slurmctld is running" in result.output


def test_help() -> None:
    for flag in ("-h", "--help"):
        result = CliRunner().invoke(jobs, [flag])
        assert result.exit_code == 0
        assert "packed, exclusive or untouched" in result.output
        assert "--json" in result.output and "--all" in result.output


def test_job_without_comment_is_untouched() -> None:
    assert job_view(Job(5))["decision"] == "untouched"
    assert job_view(Job(5, admin_comment="gpupack: bogus words"))["decision"] == "untouched"
