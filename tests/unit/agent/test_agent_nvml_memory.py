"""A job's memory and utilisation through NVML, attributed by pid: the node agent over the real
pynvml and the fake libnvidia-ml, with real processes standing for the jobs' CUDA processes
(their pids are what NVML lists; their environment and uid are what the agent checks)."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from gpus.nvml.backend import NvmlBackend
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.state import BATCH_STEP
from gpus.sim.nvml import FakeNvml

GIB = 1 << 30
UID = os.getuid()
NOBODY = 65534


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []

    def start(job: int | None, user: int | None = None) -> int:
        env = {"PATH": os.environ.get("PATH", "/bin")}
        if job is not None:
            env["SLURM_JOB_ID"] = str(job)
        kw = {"user": user} if user is not None else {}
        p = subprocess.Popen(["sleep", "60"], env=env, **kw)
        started.append(p)
        # until its exec is through, the child's /proc/PID/environ is this process's or empty
        # (seen under load): the agent would read no job, or the wrong one, from it
        deadline = time.time() + 10
        while time.time() < deadline and _environ(p.pid) != env:
            time.sleep(0.01)
        return p.pid

    yield start
    for p in started:
        p.kill()
        p.wait()


def _environ(pid: int) -> dict[str, str]:
    raw = open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def _agent(tmp_path, monkeypatch, mig: bool, mode: str = "mig", running=frozenset()):
    fake = FakeNvml(["H100-80GB"], mig_enabled=mig)
    fake.install(monkeypatch)
    agent = NodeAgent("n1", tmp_path, NvmlBackend(), isolation_mode=mode,
                      list_running_jobs=lambda: set(running))
    return fake, agent


def _mem(agent: NodeAgent, job: int) -> int:
    agent.tick()
    return agent.samples(job, latest=True)[0]["mem_bytes"]


def test_a_job_in_a_mig_slice_reads_what_its_processes_use(tmp_path, monkeypatch, procs):
    fake, agent = _agent(tmp_path, monkeypatch, mig=True)
    a = agent.isolate(7, BATCH_STEP, UID, {"SLURM_JOB_GPUS": "0", "SLURM_SHARDS_ON_NODE": "2"})
    assert a.kind == "mig" and a.gi_id is not None
    fake.start_process(0, a.gi_id, 5 * GIB, pid=procs(7))
    fake.start_process(0, a.gi_id, 1 * GIB, pid=procs(None))  # no job's (no SLURM_JOB_ID)
    assert _mem(agent, 7) == 5 * GIB
    assert agent.jobs[7].peak_mem_bytes == 5 * GIB


def test_a_job_on_a_whole_gpu_reads_7_gib(tmp_path, monkeypatch, procs):
    fake, agent = _agent(tmp_path, monkeypatch, mig=False)
    a = agent.isolate(8, BATCH_STEP, UID, {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0"})
    assert a.kind == "whole"
    fake.start_process(0, None, 7 * GIB, pid=procs(8))
    fake.start_process(0, None, 2 * GIB, pid=procs(9))  # a job this node does not run
    assert _mem(agent, 8) == 7 * GIB


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a process as another user needs root")
def test_a_process_of_another_user_claiming_the_job_counts_for_nothing(tmp_path, monkeypatch, procs):
    fake, agent = _agent(tmp_path, monkeypatch, mig=False)
    agent.isolate(8, BATCH_STEP, UID, {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0"})
    fake.start_process(0, None, 3 * GIB, pid=procs(8, user=NOBODY))
    assert _mem(agent, 8) == 0


def test_mps_shares_read_their_own_clients(tmp_path, monkeypatch, procs):
    fake, agent = _agent(tmp_path, monkeypatch, mig=False, mode="mps")
    env = {"SLURM_JOB_GPUS": "0", "SLURM_SHARDS_ON_NODE": "2"}
    assert agent.isolate(10, BATCH_STEP, UID, env).kind == "mps"
    assert agent.isolate(11, BATCH_STEP, UID, env).kind == "mps"
    fake.start_process(0, None, 3 * GIB, mps=True, pid=procs(10))
    fake.start_process(0, None, 4 * GIB, mps=True, pid=procs(11))
    assert (_mem(agent, 10), _mem(agent, 11)) == (3 * GIB, 4 * GIB)
    assert not fake.violations and not fake.errors


def test_utilisation_samples_go_to_the_job_of_the_pid(tmp_path, monkeypatch, procs):
    fake, agent = _agent(tmp_path, monkeypatch, mig=False)
    agent.isolate(8, BATCH_STEP, UID, {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0"})
    fake.start_process(0, None, GIB, pid=procs(8))
    fake.gpu(0).processes[0].samples.extend([(1_000_000, 70, 40), (1_166_666, 50, 35)])
    agent.tick()
    (s,) = agent.samples(8, latest=True)
    assert s["util_pct"] == 60.0 and s["util_source"] == "nvml-process"
