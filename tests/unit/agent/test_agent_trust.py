"""Who may ask the agent what, and how far a job's own reports are believed."""
import os
import tempfile

import pytest

from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent import client
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.server import AgentServer
from slurm_plugin.agent.state import BATCH_STEP
from slurm_plugin.agent.trust import Peer, ReportGuard, ReportRejected, check_reporter, job_of_pid
from tests.unit.agent.as_user import as_nobody

SHARD1 = {"SLURM_JOB_GPUS": "0", "SLURM_SHARDS_ON_NODE": "1"}


def test_guard_bounds():
    g = ReportGuard()
    assert g.check({"iterations": 10, "throughput": 5.0, "util_pct": 50}, None, None, 100.0, 101.0).iterations == 10
    bad = [
        ({"iterations": -1}, None, None),
        ({"iterations": "5"}, None, None),
        ({"iterations": 4}, 5, 100.0),  # backwards
        ({"iterations": 10**9}, 0, 100.0),  # faster than possible
        ({"iterations": 6, "throughput": 1e9}, 5, 100.0),
        ({"iterations": 6, "util_pct": 101}, 5, 100.0),
        ({"iterations": 6, "util_pct": float("nan")}, 5, 100.0),
        ({"iterations": 6, "workload": "../../etc"}, 5, 100.0),
        ({"iterations": 6}, 5, 100.99),  # rate limit
    ]
    for body, last_it, last_at in bad:
        with pytest.raises(ReportRejected):
            g.check(body, last_it, last_at, 99.0, 101.0)


def test_reporter_must_hold_the_token_and_belong_to_the_job(tmp_path):
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "environ").write_bytes(b"HOME=/\0SLURM_JOB_ID=7\0")
    check_reporter(7, "t", "t", Peer(42, 1000, 1000), proc=str(tmp_path))
    with pytest.raises(ReportRejected, match="token"):
        check_reporter(7, "x", "t", Peer(42, 1000, 1000), proc=str(tmp_path))
    with pytest.raises(ReportRejected, match="belongs to job 7, not to job 8"):
        check_reporter(8, "t", "t", Peer(42, 1000, 1000), proc=str(tmp_path))
    assert job_of_pid(999999, proc=str(tmp_path)) is None


@pytest.fixture
def served(tmp_path):
    sim = tmp_path / "simgpu"  # file-backed: its driver folder has the MIG capability files
    backend = SimGpuBackend(sim, "node1", gpus=["H100-80GB"])
    agent = NodeAgent("node1", tmp_path, backend, sim_dir=sim)
    sockdir = tempfile.mkdtemp(prefix="gp-agent-test-")  # reachable by user nobody
    os.chmod(sockdir, 0o755)
    server = AgentServer(os.path.join(sockdir, "agent-node1.sock"), agent, {0})
    server.serve_in_thread()
    yield agent, server
    server.shutdown()
    server.server_close()
    os.rmdir(sockdir)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_a_job_cannot_ask_for_isolation_or_read_samples(served):
    agent, server = served
    a = agent.isolate(7, BATCH_STEP, 0, SHARD1)
    agent.tick()
    sock = str(server.socket_path)
    for req in ({"op": "isolate", "job_id": 8, "step_id": 0, "env": SHARD1},
                {"op": "samples"}, {"op": "finish", "job_id": 7}, {"op": "status"}):
        answer = as_nobody(lambda req=req: client.ask(sock, req))
        assert "'status': 'error'" in answer and "not allowed" in answer, answer
    # with the right token but from a process outside the job
    answer = as_nobody(lambda: client.ask(sock, {"op": "report", "job_id": 7, "token": a.token, "iterations": 1}))
    assert "not to job 7" in answer
    assert agent.jobs[7].iterations is None
    # root is answered
    assert client.ask(sock, {"op": "samples"})["samples"][0]["job_id"] == 7
    assert client.ask(sock, {"op": "ping"})["status"] == "ok"


def test_report_from_the_job_itself_is_believed(served, monkeypatch):
    agent, server = served
    a = agent.isolate(7, BATCH_STEP, 0, SHARD1)
    monkeypatch.setattr("slurm_plugin.agent.trust.job_of_pid", lambda pid, proc="/proc": 7)
    answer = client.ask(server.socket_path, {"op": "report", "job_id": 7, "token": a.token, "iterations": 3,
                                             "throughput": 2.5, "workload": "LSTM"})
    assert answer == {"status": "ok", "neighbours": []}
    assert agent.jobs[7].iterations == 3 and agent.jobs[7].workload == "LSTM"
    bad = client.ask(server.socket_path, {"op": "report", "job_id": 7, "token": "nope", "iterations": 4})
    assert bad["status"] == "error" and "token" in bad["reason"]


def test_lines_format_for_the_spank_plugin(served, tmp_path):
    import socket

    agent, server = served
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(server.socket_path))
        s.sendall(b'{"op":"isolate","format":"lines","job_id":5,"step_id":0,"uid":0,"node":"node1",'
                  b'"env":{"SLURM_STEP_GPUS":"0","SLURM_SHARDS_ON_NODE":"1"}}\n')
        text = s.makefile().read()
    lines = text.splitlines()
    assert lines[0].startswith("OK mig:1g.10gb@") and any(line.startswith("CUDA_VISIBLE_DEVICES=MIG-") for line in lines)
    # the framework settings that keep JAX and TensorFlow from taking the whole slice at start
    assert {"XLA_PYTHON_CLIENT_PREALLOCATE=false", "TF_FORCE_GPU_ALLOW_GROWTH=true"} <= set(lines)
    # the fence: the capability nodes of its GPU instance and compute instance, in the
    # simulated driver's nvidia-caps folder (gi1 of GPU 0: minors 12 and 13)
    assert lines[1] == f"FENCE nvidia-cap12,nvidia-cap13 {tmp_path / 'simgpu' / 'node1.driver' / 'dev' / 'nvidia-caps'}"
    # and every other MIG capability node, for the device cgroup (the simulated major 61)
    assert lines[2].startswith("DENY 61 3-11,14-") and len(lines[2].split(" ")) == 3, lines[2]
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(server.socket_path))
        s.sendall(b'{"op":"isolate","format":"lines","job_id":6,"step_id":0,"node":"node9","env":{}}\n')
        assert s.makefile().read().startswith("ERR this is the agent of node1")


def test_the_report_client_sends_what_the_job_knows(served, monkeypatch):
    from click.testing import CliRunner

    from slurm_plugin.cli.report_cmd import report as report_cmd
    from slurm_plugin.report import ReportError, report

    agent, server = served
    a = agent.isolate(7, BATCH_STEP, 0, SHARD1)
    monkeypatch.setattr("slurm_plugin.agent.trust.job_of_pid", lambda pid, proc="/proc": 7)
    env = {"GPUPACK_AGENT_SOCKET": str(server.socket_path), "GPUPACK_REPORT_TOKEN": a.token, "SLURM_JOB_ID": "7"}
    assert report(812.5, iterations=6, env=env)["status"] == "ok"
    assert agent.jobs[7].throughput == 812.5 and agent.jobs[7].iterations == 6
    agent.jobs[7].last_report_at = None  # past the rate limit
    from slurm_plugin.agent.memory_sources import TorchProbe
    from tests.unit.agent.test_agent_sizes import _Torch

    assert TorchProbe(torch_module=_Torch).report(7, env=env)  # the allocator's peak, through the real socket
    assert agent.jobs[7].alloc_peak_bytes == 4 << 30
    assert agent.summary(agent.jobs[7], "test")["alloc_peak_bytes"] == 4 << 30
    with pytest.raises(ReportError, match="went backwards"):
        agent.jobs[7].last_report_at = None  # past the rate limit
        report(1.0, iterations=3, env=env)
    with pytest.raises(ReportError, match="not inside a gpupack job"):
        report(1.0, env={})
    agent.jobs[7].last_report_at = None
    out = CliRunner().invoke(report_cmd, ["--throughput", "900", "--iterations", "8"], env=env)
    assert out.exit_code == 0, out.output
    assert agent.jobs[7].throughput == 900.0


def test_guard_reads_checkpoint_reports_and_refuses_odd_ones():
    g = ReportGuard()
    ok = g.check({"iterations": 10, "checkpoint": True, "checkpoint_every_s": 600}, None, None, 100.0, 101.0)
    assert ok.checkpoint is True and ok.checkpoint_every_s == 600.0
    plain = g.check({"iterations": 10}, None, None, 100.0, 101.0)
    assert plain.checkpoint is False and plain.checkpoint_every_s is None
    for body, why in [({"iterations": 6, "checkpoint": "yes"}, "checkpoint must be true or false"),
                      ({"iterations": 6, "checkpoint": 1}, "checkpoint must be true or false"),
                      ({"iterations": 6, "checkpoint_every_s": 0}, "outside"),
                      ({"iterations": 6, "checkpoint_every_s": 10 * 86400}, "outside"),
                      ({"iterations": 6, "checkpoint_every_s": "60"}, "must be a number")]:
        with pytest.raises(ReportRejected, match=why):
            g.check(body, 5, 100.0, 99.0, 101.0)


def test_a_checkpoint_report_is_timed_by_the_agent_and_carried_by_its_samples(served, monkeypatch):
    from packer.samples import JobSample

    agent, server = served
    clock = [1000.0]
    agent.clock = lambda: clock[0]
    a = agent.isolate(7, BATCH_STEP, 0, SHARD1)
    monkeypatch.setattr("slurm_plugin.agent.trust.job_of_pid", lambda pid, proc="/proc": 7)
    body = {"op": "report", "job_id": 7, "token": a.token, "iterations": 3, "checkpoint_every_s": 30}
    assert client.ask(server.socket_path, body)["status"] == "ok"
    assert agent.jobs[7].checkpoint_every_s == 30.0 and agent.jobs[7].last_checkpoint_at is None
    clock[0] = 1012.5
    body.update(iterations=9, checkpoint=True)
    assert client.ask(server.socket_path, body)["status"] == "ok"
    assert agent.jobs[7].last_checkpoint_at == 1012.5 and agent.jobs[7].checkpoints == 1
    clock[0] = 1020.0
    bad = client.ask(server.socket_path, {**body, "iterations": 10, "checkpoint_every_s": -1})
    assert bad["status"] == "error" and "checkpoint_every_s" in bad["reason"]
    assert agent.jobs[7].last_checkpoint_at == 1012.5  # a refused report changes nothing

    agent.tick()
    sample = agent.samples(7, latest=True)[0]
    assert sample["last_checkpoint_at"] == 1012.5 and sample["checkpoint_every_s"] == 30.0
    assert JobSample.from_dict(sample) == agent.recent[7][-1]  # the round trip the helper reads
    old = {k: v for k, v in sample.items() if k not in ("last_checkpoint_at", "checkpoint_every_s")}
    parsed = JobSample.from_dict(old)  # an older agent's sample still parses
    assert parsed.last_checkpoint_at is None and parsed.checkpoint_every_s is None


def test_the_report_client_sends_a_checkpoint(served, monkeypatch):
    from click.testing import CliRunner

    from slurm_plugin.cli.report_cmd import report as report_cmd

    agent, server = served
    a = agent.isolate(7, BATCH_STEP, 0, SHARD1)
    monkeypatch.setattr("slurm_plugin.agent.trust.job_of_pid", lambda pid, proc="/proc": 7)
    env = {"GPUPACK_AGENT_SOCKET": str(server.socket_path), "GPUPACK_REPORT_TOKEN": a.token, "SLURM_JOB_ID": "7"}
    out = CliRunner().invoke(report_cmd, ["--iterations", "4", "--checkpoint", "--checkpoint-every", "120"], env=env)
    assert out.exit_code == 0, out.output
    assert agent.jobs[7].checkpoints == 1 and agent.jobs[7].checkpoint_every_s == 120.0
