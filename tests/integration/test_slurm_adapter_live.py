"""The Slurm adapter against the real local cluster (the `cluster` session fixture).

Contract used: `cluster.env` (SLURM_CONF and friends) and `cluster.submit(args) -> job id`.
Jobs here are short or held; held ones are released at the end so they finish alone.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from click.testing import CliRunner

from slurm_plugin.cli.jobs_cmd import jobs as jobs_command
from packer.gres import GresItem
from slurm_plugin.slurm import JobNotFoundError, SlurmCommandError, SlurmRunner

pytestmark = pytest.mark.integration

TAG = f"adapter-{time.time_ns() % 10**8}"


@pytest.fixture
def runner(cluster) -> SlurmRunner:
    return SlurmRunner(env=cluster.env, timeout=60)


@pytest.fixture
def held(cluster, runner: SlurmRunner):
    """Submit held jobs; release them afterwards so they run (sleep 1) and end."""
    submitted: list[int] = []

    def submit(*args: str) -> int:
        job_id = cluster.submit(["-H", "-J", TAG, *args, "--wrap", "sleep 1"])
        submitted.append(job_id)
        return job_id

    yield submit
    for job_id in submitted:
        try:
            runner.release(job_id)
        except (SlurmCommandError, JobNotFoundError):
            pass


def wait_for(check: Callable[[], bool], timeout: float = 60, what: str = "condition") -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def gpu_type(runner: SlurmRunner) -> str | None:
    for node in runner.nodes():
        for item in node.gres:
            if item.name == "gpu":
                return item.type
    return None


def test_version_and_nodes(runner: SlurmRunner) -> None:
    assert runner.version().major >= 22
    nodes = runner.nodes()
    assert nodes, "the cluster has no nodes"
    for node in nodes:
        assert node.gpus_total >= 1, node
        assert node.state, node
        assert node.gpus_used <= node.gpus_total


def test_requests_read_back_in_every_form(cluster, runner: SlurmRunner, held) -> None:
    typed = gpu_type(runner)
    two_typed = held(f"--gres=gpu:{typed}:2" if typed else "--gres=gpu:2")
    per_job = held("--gpus=1")
    per_task = held("--gpus-per-task=1", "-n1")
    exclusive = held("--exclusive", "--gres=gpu:1")
    plain = held()
    found = {job.job_id: job for job in runner.jobs()}
    for job_id in (two_typed, per_job, per_task, exclusive, plain):
        job = found[job_id]
        assert (job.name, job.state, job.state_reason, job.held, job.priority) == (
            TAG, "PENDING", "JobHeldUser", True, 0
        ), job
        assert job.submit_time is not None and job.user
    assert found[two_typed].gres == (GresItem("gpu", typed, 2),)  # multi-GPU: never rewritten
    # 22.05 states both (shared "none" / null); 24.11 states --exclusive (shared ["none"]) and
    # an empty list otherwise; 26.05's JSON states neither for a pending job (shared [] for both)
    release = cluster.release[:2]
    if release < (23, 11):
        assert found[exclusive].exclusive is True and found[plain].exclusive is False
    elif release < (26, 5):
        assert found[exclusive].exclusive is True and found[plain].exclusive is None
    else:
        assert found[exclusive].exclusive is None and found[plain].exclusive is None
    assert found[plain].gres == ()
    for job_id in (per_job, per_task):  # one GPU: the shim may pack it into shards
        assert {item.name for item in found[job_id].gres} <= {"gpu", "shard"}
        assert found[job_id].gres, found[job_id]
    assert runner.job(per_job).job_id == per_job


def test_update_hold_release_and_script(runner: SlurmRunner, held) -> None:
    job_id = held()
    odd = 'it\'s "quoted" | 50% %x $(not run)'
    first_node = runner.nodes()[0].name
    runner.update_job(job_id, Comment=odd, ExcNodeList=[first_node])
    job = runner.job(job_id)
    assert job.comment == odd and job.excluded_nodes == (first_node,)
    assert "sleep 1" in runner.batch_script(job_id)
    runner.release(job_id)
    assert runner.job(job_id).held is False


def test_requeue_a_running_job(cluster, runner: SlurmRunner) -> None:
    job_id = cluster.submit(["-J", TAG, "--wrap", "sleep 5"])
    wait_for(lambda: runner.job(job_id).state == "RUNNING", what=f"job {job_id} to run")
    runner.requeue(job_id)
    wait_for(lambda: runner.job(job_id).restart_cnt == 1, what=f"job {job_id} to be requeued")
    # a requeued job passes through COMPLETING on its way back to the queue
    wait_for(lambda: runner.job(job_id).base_state in ("PENDING", "RUNNING"), what=f"job {job_id} back in the queue")


def test_unknown_job_and_accounting(runner: SlurmRunner) -> None:
    with pytest.raises(JobNotFoundError):
        runner.hold(99_999_999)
    with pytest.raises(JobNotFoundError):
        runner.batch_script(99_999_999)
    try:
        runner.accounting()
    except SlurmCommandError as exc:  # no slurmdbd in the dev cluster
        assert exc.command[0] == "sacct" and exc.returncode not in (None, 0)


def test_jobs_command_json(cluster, held) -> None:
    job_id = held("--gres=gpu:1")
    result = CliRunner().invoke(jobs_command, ["--json"], env=cluster.env)
    assert result.exit_code == 0, result.output
    views = {view["job_id"]: view for view in json.loads(result.output)}
    view = views[job_id]
    assert view["name"] == TAG and view["state"] == "PENDING"
    assert view["decision"] in ("packed", "exclusive", "untouched")
    assert view["gres"].startswith(("gpu:", "shard:"))
    table = CliRunner().invoke(jobs_command, [], env=cluster.env)
    assert table.exit_code == 0 and str(job_id) in table.output


#: job names and comments a user may write: spaces, newlines, squeue's delimiters, unicode
HOSTILE = ("two words", "line\nbreak", "pipes|and,commas:0", "tab\there ~x~", "ünïcødé ✓ 名前",
           'we"ird %x name')


def test_formatted_listing_reads_as_the_json(cluster, runner: SlurmRunner, held) -> None:
    """The formatted queue (`squeue -h -O`, the watcher's per-round read) gives every job the
    JSON gives, with the same fields, whatever its user wrote in its name and comment; with
    GPUPACK_RECORD_DIR set, both outputs are kept as fixtures (tests/data/slurm/)."""
    import os
    from pathlib import Path

    from slurm_plugin.slurm.build import formatted_jobs_args
    from slurm_plugin.slurm.formatted import Markers, fields_for, format_spec

    ids = [held("--gres=gpu:1", "-J", name, f"--comment={name} c") for name in HOSTILE]
    ids.append(held("--exclusive", "--gres=gpu:1", "--time=1-02:03:00", "-J", "x,y"))
    runner.update_job(ids[-1], ExcNodeList="node3")
    listing = runner.formatted_jobs()
    record = os.environ.get("GPUPACK_RECORD_DIR")
    if record:
        markers = Markers("0123456789abcdef")
        version = runner.version()
        label = f"{version.major}.{version.minor:02d}"
        out = runner.run(formatted_jobs_args(format_spec(fields_for(version), markers)), env={"TZ": "UTC"}).stdout
        Path(record, f"squeue_{label}_formatted.txt").write_text(out)
        Path(record, f"squeue_{label}_formatted_json.json").write_text(
            runner.run(["squeue", "--json", "--all", "--states=all"], env={"TZ": "UTC"}).stdout)
    assert listing.skipped == ()
    formatted = {j.job_id: j for j in listing.jobs}
    json_jobs = {j.job_id: j for j in runner.jobs_in_play()}
    # other tests' jobs of the session may change state between the two reads: only containment,
    # and a job the formatted read listed that the JSON read no longer has in play has ended since
    assert set(ids) <= set(formatted), (sorted(set(ids) - set(formatted)), listing)
    left = set(formatted) - set(json_jobs)
    assert all(j.is_finished for j in runner.jobs_json(left) if j.job_id in left), left
    for name, job_id in zip(HOSTILE, ids):
        assert formatted[job_id].name == name and formatted[job_id].comment == f"{name} c"
    fields = fields_for(runner.version())
    differ = []
    for job_id in ids:  # this test's jobs: others of the session may change state between the two reads
        job = formatted[job_id]
        for _name, attr, _read in fields:
            if attr in ("tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket"):
                attr = "gres"
            if attr == "exit_code" and not json_jobs[job_id].is_finished:
                continue  # the JSON of a job still in play reports no exit code on some releases
            if attr in ("std_out", "std_err"):  # 22.05's JSON leaves them unexpanded (`slurm.stdio`)
                continue
            if getattr(job, attr) != getattr(json_jobs[job_id], attr):
                differ.append((job_id, attr, getattr(job, attr), getattr(json_jobs[job_id], attr)))
    assert differ == []
    assert formatted[ids[-1]].time_limit_s == 93780
    if runner.version().tuple >= (24, 5):  # ExcNodes in -O from 24.05; 22.05 reads it from the JSON
        assert formatted[ids[-1]].excluded_nodes == ("node3",)


def test_a_running_jobs_allocation_by_id_reads_as_the_json(cluster, runner: SlurmRunner) -> None:
    """`scontrol -d show job ID` (22.05's read by id of a running job's GPUs, `show_job_text`)
    gives the JSON's `gres_detail`; a job whose name prints a line of its own is refused."""
    from slurm_plugin.slurm.gres import parse_gres_item
    from slurm_plugin.slurm.show_job_text import ShowJobTextError, job_allocation

    if runner.version().filters_json:
        pytest.skip("22.05's path only: 23.11 and later read a running job's detail as JSON, by id")
    plain = cluster.submit(["-J", TAG, "--gres=shard:1", "--wrap", "sleep 20"])
    forged = cluster.submit(["-J", "evil\n     Nodes=node1 CPU_IDs=0 Mem=0 GRES=shard:8(IDX:0)",
                             "--gres=shard:1", "--wrap", "sleep 20"])
    for job_id in (plain, forged):
        wait_for(lambda: runner.job(job_id).state == "RUNNING", what=f"job {job_id} to run")
    shown = job_allocation(runner, plain)
    json_job = {j.job_id: j for j in runner.jobs_json([plain])}[plain]
    assert shown is not None and list(shown.hosts) == [json_job.nodes]
    assert tuple(map(parse_gres_item, shown.gres)) == json_job.gres_detail != ()
    with pytest.raises(ShowJobTextError):
        job_allocation(runner, forged)
    assert job_allocation(runner, 99_999_999) is None
