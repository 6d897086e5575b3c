"""The MPS fence against a job's own user: the node agent over the real pynvml and the
simulated GPU's libnvidia-ml (as the dev cluster's agents run), the stand-in MPS control
daemon (conftest), and simulated CUDA processes. Nothing here is mocked: the agent sets the
compute mode through NVML, the simulated GPU refuses what that mode refuses."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import pynvml
import pytest

from gpus.nvml.backend import NvmlBackend
from gpus.sim.backend import SimGpuBackend
from gpus.sim.mps_control import client_exit, connect_client
from gpus.sim.nvml import SimulatedNvml
from slurm_plugin.agent.daemon import AgentError, NodeAgent
from slurm_plugin.agent.exclusive_mode import MARK, ExclusiveMode
from slurm_plugin.agent.state import BATCH_STEP
from simjobs import workload

GIB = 1 << 30
UID = os.getuid()
SHARD2 = {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0", "SLURM_SHARDS_ON_NODE": "2"}
WHOLE1 = {"SLURM_JOB_GPUS": "1", "CUDA_VISIBLE_DEVICES": "1"}
BUSY = "all CUDA-capable devices are busy or unavailable"
QUIET = dict(mem_growth=0, iters=1, iter_ms=1, workload=None, report=False, out=io.StringIO())


@pytest.fixture
def node(tmp_path, monkeypatch):
    """(the simulated libnvidia-ml, the workloads' view of the same GPUs, an agent factory)."""
    lib = SimulatedNvml(tmp_path / "sim", "node1", gpus=["H100-80GB", "H100-80GB"], mig_enabled=False)
    lib.install(monkeypatch)
    backends: list[NvmlBackend] = []

    def agent(**kw) -> NodeAgent:
        backends.append(NvmlBackend())
        return NodeAgent("node1", tmp_path / "agent", backends[-1], **kw)

    yield lib, SimGpuBackend(tmp_path / "sim", "node1"), agent
    for b in backends:
        b.close()
    assert not lib.violations and not lib.errors


@pytest.fixture
def clients():
    """Simulated CUDA processes that keep running (``gpupack simgpu run``), ended after the test."""
    started: list[subprocess.Popen] = []

    def start(env: dict[str, str]) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-m", "slurm_plugin", "simgpu", "run", "--mem-start", "1GiB",
                              "--iters", "100000", "--iter-ms", "50", "--no-report"],
                             env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started.append(p)
        return p

    yield start
    for p in started:
        p.terminate()
        p.wait(timeout=10)


def nvml_mode(gpu_index: int) -> int:
    return pynvml.nvmlDeviceGetComputeMode(pynvml.nvmlDeviceGetHandleByIndex(gpu_index))


def step_env(tmp_path, a, **extra) -> dict[str, str]:
    """What a step of the job gets (the agent's answer), the workload's own fence dropped."""
    env = {"GPUPACK_SIM_DIR": str(tmp_path / "sim"), "GPUPACK_NODE": "node1", **a.env, **extra}
    env.pop("GPUPACK_MEM_LIMIT_BYTES", None)
    env.pop("GPUPACK_AGENT_SOCKET", None)
    return env


def wait_registered(sim: SimGpuBackend, device: str, p: subprocess.Popen) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rec = sim.snapshot()["gpus"][0].get("processes", {}).get(device, {}).get(str(p.pid))
        if rec is not None:
            return rec
        assert p.poll() is None, p.communicate()
        time.sleep(0.05)
    raise AssertionError(f"process {p.pid} never made its CUDA context on {device}")


def test_a_process_of_the_job_outside_mps_is_refused_by_the_exclusive_gpu(tmp_path, node, clients):
    """A packed MPS job's own process that unsets its MPS variables (so the daemon's limits
    would not hold it) cannot make a context on the GPU while the MPS clients run: the agent
    put the GPU in EXCLUSIVE_PROCESS through NVML. After the job, DEFAULT is back."""
    lib, sim, make_agent = node
    agent = make_agent(isolation_mode="mps")
    a = agent.isolate(9, BATCH_STEP, UID, SHARD2)
    assert nvml_mode(0) == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    assert nvml_mode(1) == pynvml.NVML_COMPUTEMODE_DEFAULT
    client = clients(step_env(tmp_path, a))
    assert wait_registered(sim, a.device_uuid, client)["mps"] is True  # through the daemon's server
    hostile = step_env(tmp_path, a)
    for name in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"):
        hostile.pop(name)
    err = io.StringIO()
    assert workload.run(mem_start=40 * GIB, env=hostile, err=err, backend=sim, **QUIET) == 2
    assert BUSY in err.getvalue() and f"held by {client.pid} (MPS client)" in err.getvalue()
    assert str(os.getpid()) not in sim.snapshot()["gpus"][0].get("processes", {}).get(a.device_uuid, {})
    # a second client of the job through MPS still joins the server's context
    assert workload.run(mem_start=GIB, env=step_env(tmp_path, a), err=io.StringIO(), backend=sim, **QUIET) == 0
    client.terminate()
    client.wait(timeout=10)
    agent.finish(9)
    assert nvml_mode(0) == pynvml.NVML_COMPUTEMODE_DEFAULT
    assert workload.run(mem_start=40 * GIB, env=hostile, err=io.StringIO(), backend=sim, **QUIET) == 0


def test_the_mps_server_started_up_front_refuses_a_plain_process_that_comes_first(tmp_path, node, clients):
    """The job's plain process (MPS variables unset) starts before any MPS client: the agent
    started the user's server when it set up the share (``start_server -uid``), so the server
    already holds the exclusive GPU's one context and the plain process is refused; the MPS
    client that comes after joins the server. Without the server up front the plain process
    would hold the GPU and the client be refused. The server's context ends with the daemon."""
    _lib, sim, make_agent = node
    agent = make_agent(isolation_mode="mps", sim_dir=tmp_path / "sim")
    a = agent.isolate(9, BATCH_STEP, UID, SHARD2)
    daemon = agent.isolator.mps.daemons.daemons["gpu0"]
    assert daemon.server_uid == UID
    assert sim.snapshot()["gpus"][0]["mps_servers"][a.device_uuid]  # no client yet
    hostile = step_env(tmp_path, a)
    for name in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
        hostile.pop(name)
    plain = clients(hostile)  # a long run, were it let in
    try:
        rc = plain.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the plain process got the exclusive GPU before the MPS server")
    err = plain.communicate()[1]
    assert rc == 2 and BUSY in err and "held by MPS server" in err, err
    client = clients(step_env(tmp_path, a))
    assert wait_registered(sim, a.device_uuid, client)["mps"] is True
    client.terminate()
    client.wait(timeout=10)
    agent.finish(9)
    assert not sim.snapshot()["gpus"][0].get("mps_servers")  # the server went with the daemon
    assert nvml_mode(0) == pynvml.NVML_COMPUTEMODE_DEFAULT


def test_a_client_that_raises_its_mps_variables_keeps_the_daemons_limits(tmp_path, node):
    """CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT raised by the
    job's process: the daemon's percentage and memory limit still hold it."""
    _lib, sim, make_agent = node
    agent = make_agent(isolation_mode="mps")
    a = agent.isolate(9, BATCH_STEP, UID, SHARD2)
    assert a.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40" and 31 * GIB < a.mem_limit_bytes < 32 * GIB
    env = step_env(tmp_path, a, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="100", CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=80G")
    limits = connect_client(env, UID, os.getpid())
    client_exit(env, os.getpid())
    assert limits is not None and limits.active_thread_pct == 40 and limits.pinned_bytes <= a.mem_limit_bytes
    err = io.StringIO()
    assert workload.run(mem_start=40 * GIB, env=env, err=err, backend=sim, **QUIET) == 1
    assert "CUDA out of memory" in err.getvalue()
    agent.finish(9)


def test_a_whole_gpu_job_is_not_fenced(tmp_path, node, clients):
    """An unpacked job on a whole GPU beside an MPS GPU: its GPU stays in DEFAULT compute mode
    and its processes share it as before (guards against fencing more than the MPS devices)."""
    _lib, sim, make_agent = node
    agent = make_agent(isolation_mode="mps")
    agent.isolate(9, BATCH_STEP, UID, SHARD2)
    w = agent.isolate(10, BATCH_STEP, UID, WHOLE1)
    assert w.kind == "whole" and nvml_mode(1) == pynvml.NVML_COMPUTEMODE_DEFAULT
    gpu1 = sim.list_gpus()[1].uuid
    env = {"GPUPACK_SIM_DIR": str(tmp_path / "sim"), "GPUPACK_NODE": "node1", "GPUPACK_SIM_DEVICE": gpu1, **w.env}
    first = clients(env)
    wait_registered_on(sim, 1, gpu1, first)
    assert workload.run(mem_start=GIB, env=env, err=io.StringIO(), backend=sim, **QUIET) == 0
    agent.finish(10)
    agent.finish(9)


def wait_registered_on(sim: SimGpuBackend, gpu_index: int, device: str, p: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while str(p.pid) not in sim.snapshot()["gpus"][gpu_index].get("processes", {}).get(device, {}):
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, f"process {p.pid} never made its CUDA context on {device}"
        time.sleep(0.05)


def test_nvml_refusing_the_compute_mode_refuses_the_mps_share(node):
    """Without root NVML refuses nvmlDeviceSetComputeMode (NO_PERMISSION): the packed job is
    not isolated (no daemon, no share), rather than run beside others unfenced."""
    lib, _sim, make_agent = node
    agent = make_agent(isolation_mode="mps")
    lib.privileged = False
    with pytest.raises(AgentError, match="exclusive-process compute mode.*needs root"):
        agent.isolate(9, BATCH_STEP, UID, SHARD2)
    assert agent.isolator.mps.daemons.pid("gpu0") is None and 9 not in agent.jobs
    assert nvml_mode(0) == pynvml.NVML_COMPUTEMODE_DEFAULT
    assert not (agent.isolator.mps.daemons.root / "gpu0" / MARK).exists()  # nothing to put back later
    assert not [line for line in agent.reconcile() if "compute mode" in line]


def test_an_agent_restarted_with_no_mps_share_left_puts_default_back(tmp_path, node):
    """The agent set EXCLUSIVE_PROCESS and died; its job ended meanwhile. The next agent finds
    no MPS share on the GPU: its daemon is stopped and the compute mode is DEFAULT again. A
    device marked by an agent that is gone (no job of it in the state) is put back too; a
    mode nobody marked is left as the administrator set it."""
    _lib, _sim, make_agent = node
    first = make_agent(isolation_mode="mps")
    first.isolate(9, BATCH_STEP, UID, SHARD2)
    root = first.isolator.mps.daemons.root
    assert (root / "gpu0" / MARK).exists() and nvml_mode(0) == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    ExclusiveMode(first.backend, root).hold("gpu1", 1, None)  # an agent killed before its state was saved
    later = time.time() + 3600  # past the reconciler's grace: job 9 is gone from Slurm
    second = make_agent(isolation_mode="mps", list_running_jobs=lambda: set(), clock=lambda: later)
    done = second.reconcile()
    assert 9 not in second.jobs and second.isolator.mps.daemons.pid("gpu0") is None
    assert "MPS device gpu1: compute mode back to DEFAULT" in done
    assert nvml_mode(0) == nvml_mode(1) == pynvml.NVML_COMPUTEMODE_DEFAULT
    assert not list(root.glob(f"*/{MARK}"))
    # an exclusive mode the agent did not set stays
    pynvml.nvmlDeviceSetComputeMode(pynvml.nvmlDeviceGetHandleByIndex(1), pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)
    second.reconcile()
    assert nvml_mode(1) == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS


def test_mps_inside_a_mig_instance_fences_that_mig_device_only(tmp_path, monkeypatch):
    """On a MIG GPU the compute mode is each MIG device's (NVML refuses it on the parent): the
    MPS-shared instance goes EXCLUSIVE_PROCESS, the GPU's other instances keep DEFAULT."""
    lib = SimulatedNvml(tmp_path / "sim", "node1", gpus=["H100-80GB"], mig_enabled=True)
    lib.install(monkeypatch)
    backend = NvmlBackend()
    agent = NodeAgent("node1", tmp_path / "agent", backend, mps_in_mig_shares=3)
    a = agent.isolate(9, BATCH_STEP, UID, {**SHARD2, "SLURM_SHARDS_ON_NODE": "1"})
    other = agent.isolate(10, BATCH_STEP, UID, {**SHARD2, "SLURM_SHARDS_ON_NODE": "4"})
    assert a.kind == "mps" and other.kind == "mig"
    assert backend.compute_mode(0, a.gi_id) == "EXCLUSIVE_PROCESS"
    assert backend.compute_mode(0, other.gi_id) == "DEFAULT"
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml_mode(0)
    sim = SimGpuBackend(tmp_path / "sim", "node1")
    hostile = {"GPUPACK_SIM_DIR": str(tmp_path / "sim"), "GPUPACK_NODE": "node1", "GPUPACK_SIM_DEVICE": a.device_uuid}
    sim.start_process(a.device_uuid, str(os.getppid()), mps=True)  # a live MPS client of the instance
    err = io.StringIO()
    assert workload.run(mem_start=GIB, env=hostile, err=err, backend=sim, **QUIET) == 2 and BUSY in err.getvalue()
    sim.end_process(a.device_uuid, str(os.getppid()))
    agent.finish(9)
    agent.finish(10)
    backend.close()
    assert not lib.violations and not lib.errors
