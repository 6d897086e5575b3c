"""SlurmRunner over the stateful FakeSlurm (both releases), and its error paths."""
from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from slurm_plugin.slurm.errors import (
    JobNotFoundError,
    SlurmCommandError,
    SlurmParseError,
    SlurmTimeoutError,
)
from slurm_plugin.slurm.fake import FakeSlurm, UnsupportedCommand
from packer.gres import GresItem
from slurm_plugin.slurm.model import SlurmVersion
from slurm_plugin.slurm.runner import CommandResult, SlurmRunner, subprocess_executor

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm"


@pytest.fixture(params=["22.05.8", "23.11.4"])
def fake(request: pytest.FixtureRequest) -> FakeSlurm:
    return FakeSlurm(request.param)


@pytest.fixture
def runner(fake: FakeSlurm) -> SlurmRunner:
    return SlurmRunner(executor=fake, slurm_conf="/etc/test/slurm.conf")


def recorded(stdout: str = "", stderr: str = "", returncode: int = 0):
    """An executor that answers every command with the same recorded output."""

    def execute(args: Sequence[str], env: Mapping[str, str], timeout: float) -> CommandResult:
        return CommandResult(tuple(args), returncode, stdout, stderr)

    return execute


# ------------------------------------------------------------------ reading


def test_jobs_and_one_job(fake: FakeSlurm, runner: SlurmRunner) -> None:
    packed = fake.submit(gres="gres:shard:2", admin_comment="gpupack: packed shard:2", state="RUNNING",
                         nodes="node1", gres_detail=["shard:2(IDX:0)"])
    pending = fake.submit(tres_per_job="gres:gpu:1")
    jobs = runner.jobs()
    assert [j.job_id for j in jobs] == [packed, pending]
    assert runner.job(packed).gres == (GresItem("shard", None, 2),)
    assert runner.job(pending).gres == (GresItem("gpu", None, 1, per="job"),)
    assert [j.job_id for j in runner.jobs([pending])] == [pending]


def test_the_command_follows_the_release(fake: FakeSlurm, runner: SlurmRunner) -> None:
    job_id = fake.submit(gres="gres:gpu:1")
    runner.job(job_id)
    runner.nodes()
    if fake.scontrol_json:
        assert ["scontrol", "--json", "show", "job", str(job_id)] in fake.calls
        assert ["scontrol", "--json", "show", "node"] in fake.calls
    else:
        assert ["sinfo", "--json"] in fake.calls
        assert not any(call[:2] == ["scontrol", "--json"] for call in fake.calls)


def test_version_is_asked_once(fake: FakeSlurm, runner: SlurmRunner) -> None:
    runner.nodes()
    runner.nodes()
    assert fake.calls.count(["scontrol", "--version"]) == 1
    assert str(runner.version()) == fake.release.replace(".8", ".8")


def test_slurm_conf_passes_through(fake: FakeSlurm, runner: SlurmRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    runner.jobs()
    assert fake.envs[-1]["SLURM_CONF"] == "/etc/test/slurm.conf"
    monkeypatch.setenv("SLURM_CONF", "/from/env/slurm.conf")
    SlurmRunner(executor=fake).jobs()
    assert fake.envs[-1]["SLURM_CONF"] == "/from/env/slurm.conf"
    SlurmRunner(executor=fake, env={"SLURM_CONF": "/given.conf"}).jobs()
    assert fake.envs[-1]["SLURM_CONF"] == "/given.conf"


def test_nodes(runner: SlurmRunner) -> None:
    nodes = runner.nodes()
    assert [n.name for n in nodes] == ["node1", "node2"]
    assert nodes[0].gpus_total == 2 and nodes[0].shards_total == 16


# ------------------------------------------------------------------ changing


def test_hold_and_release(fake: FakeSlurm, runner: SlurmRunner) -> None:
    job_id = fake.submit(gres="gres:gpu:1", priority=1234)
    runner.hold(job_id)
    held = runner.job(job_id)
    assert held.held is True and held.priority == 0 and held.state_reason == "JobHeldUser"
    runner.release(job_id)
    assert runner.job(job_id).priority == 1234 and runner.job(job_id).held is False


def test_requeue_and_requeuehold(fake: FakeSlurm, runner: SlurmRunner) -> None:
    job_id = fake.submit(gres="gres:shard:2", state="RUNNING", nodes="node1")
    runner.requeue(job_id)
    job = runner.job(job_id)
    assert (job.state, job.restart_cnt, job.state_reason) == ("PENDING", 1, "BeginTime")
    with pytest.raises(SlurmCommandError, match="Job is pending execution") as info:
        runner.requeue(job_id)
    assert info.value.returncode == 1
    runner.update_job(job_id, StartTime="now")  # what the helper does to skip the requeue delay
    assert runner.job(job_id).state_reason in (None, "None")
    fake.jobs[job_id].state = "FAILED"
    with pytest.raises(SlurmCommandError, match="no longer pending"):
        runner.update_job(job_id, StartTime="now")
    runner.requeue(job_id, hold=True)
    assert runner.job(job_id).held is True and runner.job(job_id).restart_cnt == 2


def test_update_and_top(fake: FakeSlurm, runner: SlurmRunner) -> None:
    job_id = fake.submit(gres="gres:gpu:1", comment="mine")
    runner.update_job(job_id, AdminComment="site | gpupack: exclusive reason=no-history",
                      ExcNodeList=["node1", "node2"], Priority=99)
    job = runner.job(job_id)
    assert job.admin_comment == "site | gpupack: exclusive reason=no-history"
    assert job.excluded_nodes == ("node1", "node2") and job.priority == 99 and job.comment == "mine"
    runner.update_job(job_id, TresPerNode="gres/shard:2")
    assert runner.job(job_id).gres == (GresItem("shard", None, 2),)
    runner.top(job_id)
    assert runner.job(job_id).priority > 99


def test_batch_script(fake: FakeSlurm, runner: SlurmRunner) -> None:
    job_id = fake.submit(script="#!/bin/bash\necho 'hi %x'\n")
    assert runner.batch_script(job_id) == "#!/bin/bash\necho 'hi %x'\n"


def test_the_fake_refuses_unknown_commands(runner: SlurmRunner) -> None:
    with pytest.raises(UnsupportedCommand):
        runner.run(["scancel", "1"])


# ------------------------------------------------------------------ error paths


@pytest.mark.parametrize(
    "action",
    [
        lambda r: r.hold(999),
        lambda r: r.release(999),
        lambda r: r.requeue(999),
        lambda r: r.update_job(999, Comment="x"),
        lambda r: r.batch_script(999),  # 22.05 exits 0 here; stderr tells
        lambda r: r.job(999),
    ],
)
def test_unknown_job_ids(runner: SlurmRunner, action) -> None:
    with pytest.raises(JobNotFoundError, match="job 999 is not known") as info:
        action(runner)
    assert info.value.job_id == 999


def test_cause_of_unknown_job_keeps_the_command(runner: SlurmRunner) -> None:
    with pytest.raises(JobNotFoundError) as info:
        runner.hold(999)
    cause = info.value.__cause__
    assert isinstance(cause, SlurmCommandError)
    assert cause.command == ["scontrol", "hold", "999"] and cause.returncode == 1
    assert "Invalid job id specified" in cause.stderr


def test_a_field_scontrol_refuses(fake: FakeSlurm, runner: SlurmRunner) -> None:
    job_id = fake.submit()
    with pytest.raises(SlurmCommandError, match=r"`scontrol update JobId=\d+ QOS=high` failed \(exit 1\): "
                       "Update of this parameter is not supported"):
        runner.update_job(job_id, QOS="high")


def test_sacct_without_slurmdbd(runner: SlurmRunner) -> None:
    with pytest.raises(SlurmCommandError, match="needs slurmdbd") as info:
        runner.accounting()
    assert info.value.stderr == (DATA / "sacct_22.05_no_slurmdbd.stderr.txt").read_text()


def test_recorded_controller_unreachable_with_exit_0() -> None:
    runner = SlurmRunner(executor=recorded((DATA / "squeue_22.05_controller_unreachable.json").read_text()))
    with pytest.raises(SlurmCommandError, match="Failed while looking for jobs.*Check that slurmctld is running") as info:
        runner.jobs()
    assert info.value.returncode == 0


def test_errors_beside_jobs_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    doc = '{"errors": [{"description": "partial answer"}], "jobs": [{"job_id": 3}]}'
    with caplog.at_level("WARNING"):
        assert [j.job_id for j in SlurmRunner(executor=recorded(doc)).jobs()] == [3]
    assert "partial answer" in caplog.text


def test_recorded_scontrol_json_on_22_05() -> None:
    stderr = (DATA / "scontrol_22.05_json_unsupported.stderr.txt").read_text()
    runner = SlurmRunner(executor=recorded(stderr=stderr, returncode=1), version=SlurmVersion(23, 11, 0))
    with pytest.raises(SlurmCommandError, match="unrecognized option '--json'"):
        runner.nodes()


def test_output_that_is_not_json() -> None:
    runner = SlurmRunner(executor=recorded("squeue: error: something odd\n"))
    with pytest.raises(SlurmParseError, match="^squeue: not JSON"):
        runner.jobs()


def test_bad_slurm_conf_message_has_a_hint() -> None:
    stderr = (DATA / "squeue_22.05_bad_slurm_conf.stderr.txt").read_text()
    runner = SlurmRunner(executor=recorded(stderr=stderr, returncode=1), slurm_conf="/nonexistent")
    with pytest.raises(SlurmCommandError, match=r"SLURM_CONF=/nonexistent"):
        runner.jobs()


# ------------------------------------------------------------------ the real executor (mocked)


def test_subprocess_executor_runs_argv_without_a_shell(mocker) -> None:
    run = mocker.patch("slurm_plugin.slurm.runner.subprocess.run",
                       return_value=subprocess.CompletedProcess(["x"], 0, "slurm 23.11.4\n", ""))
    result = SlurmRunner(slurm_conf="/c/slurm.conf", timeout=7).run(["scontrol", "--version"])
    assert result.stdout == "slurm 23.11.4\n"
    args, kwargs = run.call_args
    assert args[0] == ["scontrol", "--version"]
    assert kwargs["timeout"] == 7 and kwargs["env"]["SLURM_CONF"] == "/c/slurm.conf"
    assert kwargs.get("shell") is not True and kwargs["check"] is False


def test_nonzero_exit(mocker) -> None:
    stderr = (DATA / "scontrol_22.05_hold_invalid.stderr.txt").read_text()
    mocker.patch("slurm_plugin.slurm.runner.subprocess.run",
                 return_value=subprocess.CompletedProcess(["x"], 1, "", stderr))
    with pytest.raises(SlurmCommandError) as info:
        SlurmRunner().run(["scontrol", "hold", "99999"])
    error = info.value
    assert (error.command, error.returncode, error.stderr) == (["scontrol", "hold", "99999"], 1, stderr)
    assert str(error).startswith("`scontrol hold 99999` failed (exit 1): Invalid job id specified")


def test_timeout(mocker) -> None:
    mocker.patch("slurm_plugin.slurm.runner.subprocess.run",
                 side_effect=subprocess.TimeoutExpired(["squeue"], 3, stderr=b"retrying in 1sec"))
    with pytest.raises(SlurmTimeoutError, match=r"did not finish.*retrying in 1sec.*ran past 3s") as info:
        SlurmRunner(timeout=3).jobs()
    assert info.value.returncode is None


def test_command_missing(mocker) -> None:
    mocker.patch("slurm_plugin.slurm.runner.subprocess.run",
                 side_effect=FileNotFoundError(2, "No such file or directory", "squeue"))
    with pytest.raises(SlurmCommandError, match="install slurm-client") as info:
        SlurmRunner().jobs()
    assert info.value.returncode == 127


def test_direct_executor_call_uses_no_shell_for_odd_values(mocker) -> None:
    run = mocker.patch("slurm_plugin.slurm.runner.subprocess.run",
                       return_value=subprocess.CompletedProcess(["x"], 0, "", ""))
    subprocess_executor(["scontrol", "update", "JobId=1", "Comment=$(rm -rf /); `x`"], {}, 1.0)
    assert run.call_args.args[0][-1] == "Comment=$(rm -rf /); `x`"


def test_job_ids_on_a_node_come_from_a_filtered_text_query(fake: FakeSlurm, runner: SlurmRunner) -> None:
    fake.submit(job_id=5, state="RUNNING", nodes="node[1-2]")
    fake.submit(job_id=6, state="COMPLETING", nodes="node2")
    fake.submit(job_id=7, state="COMPLETED", nodes="node2")
    fake.submit(job_id=8, state="PENDING")
    assert runner.job_ids_on_node("node2") == {5, 6}
    assert runner.job_ids_on_node("node3") == set()
    with pytest.raises(ValueError, match="not a node name"):
        runner.job_ids_on_node("node1 --all")


def test_job_ids_on_a_node_refuse_output_they_do_not_understand() -> None:
    def executor(args: Sequence[str], env: Mapping[str, str], timeout: float) -> CommandResult:
        return CommandResult(list(args), 0, "123\nslurm_load_jobs error: Socket timed out\n", "")

    with pytest.raises(SlurmCommandError, match="unexpected squeue line"):
        SlurmRunner(executor=executor).job_ids_on_node("node1")
