"""The agent's MPS control daemons, run for real: the dev cluster's stand-in control program
(conftest), the simulated GPU enforcing the limits the daemon sets."""
import io
import json
import os
import signal
import time

import pytest

from gpus.sim.backend import SimGpuBackend
from mig.errors import MigError
from gpus.sim.mps_control import STATE_FILE, connect_client
from slurm_plugin.agent.daemon import AgentError, NodeAgent
from slurm_plugin.agent.mps_daemons import MpsDaemons, MpsLimits
from slurm_plugin.agent.state import BATCH_STEP
from simjobs import workload

GIB = 1 << 30
SHARD2 = {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0", "SLURM_SHARDS_ON_NODE": "2"}
SHARD1 = {**SHARD2, "SLURM_SHARDS_ON_NODE": "1"}


def _wait_gone(daemons, key: str) -> None:
    deadline = time.monotonic() + 10
    while daemons.pid(key) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert daemons.pid(key) is None


def mib_floor(n: int) -> int:
    return n >> 20 << 20  # the daemon's limit is set in whole MiB


def daemon_state(pipe) -> dict:
    return json.loads((pipe / STATE_FILE).read_text())


def test_a_daemon_starts_on_its_device_with_its_limits_and_quits(tmp_path):
    daemons = MpsDaemons(tmp_path)
    d = daemons.ensure("gpu0", "GPU-abc", MpsLimits(40, 32768))
    pid = daemons.pid("gpu0")
    assert pid and (d.pipe / "nvidia-cuda-mps-control.pid").read_text().strip() == str(pid)
    assert "CUDA_VISIBLE_DEVICES=GPU-abc" in (d.logs / "control.log").read_text()
    state = daemon_state(d.pipe)
    assert state["default_pct"] == 40 and state["default_pinned"] == {"0": 32768 << 20}
    # the same limits again: the running daemon is kept, nothing started
    assert daemons.ensure("gpu0", "GPU-abc", MpsLimits(40, 32768)) is d and daemons.pid("gpu0") == pid
    daemons.stop("gpu0")
    assert daemons.pid("gpu0") is None and not (d.pipe / "nvidia-cuda-mps-control.pid").exists()
    assert "quit" in (d.logs / "control.log").read_text()


def test_new_limits_reach_a_running_server_too(tmp_path):
    daemons = MpsDaemons(tmp_path)
    d = daemons.ensure("gpu0", "GPU-abc", MpsLimits(40, 1024))
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(d.pipe)}
    first = connect_client(env, 1000, os.getpid())
    assert (first.active_thread_pct, first.pinned_bytes) == (40, 1024 << 20)
    daemons.ensure("gpu0", "GPU-abc", MpsLimits(60, 2048))
    (server,) = daemon_state(d.pipe)["servers"]
    assert server["pid"] == first.server and server["active_thread_pct"] == 60
    assert server["pinned"] == {"0": 2048 << 20}


def test_a_dead_daemon_is_started_again_with_its_limits(tmp_path):
    daemons = MpsDaemons(tmp_path)
    d = daemons.ensure("gpu0", "GPU-abc", MpsLimits(25, 4096))
    old = daemons.pid("gpu0")
    os.kill(old, signal.SIGKILL)
    _wait_gone(daemons, "gpu0")
    assert daemons.watch() == ["MPS daemon gpu0 died; started again with its limits"]
    assert daemons.pid("gpu0") not in (None, old) and d.restarts == 1
    state = daemon_state(d.pipe)
    assert state["default_pct"] == 25 and state["default_pinned"] == {"0": 4096 << 20}
    assert daemons.watch() == []  # running: nothing to do


def test_limits_the_daemon_refuses_fail_the_isolation(tmp_path):
    daemons = MpsDaemons(tmp_path)
    with pytest.raises(AgentError, match="refused.*active thread percentage"):
        daemons.ensure("gpu0", "GPU-abc", MpsLimits(0, 1024))
    with pytest.raises(AgentError, match="no MPS control program"):
        MpsDaemons(tmp_path / "x", "/nonexistent/nvidia-cuda-mps-control").ensure("gpu0", "GPU-a", MpsLimits(5, 1))


def test_two_jobs_of_one_user_share_one_daemon_stopped_after_the_last(tmp_path):
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB"], mig_enabled=False)
    agent = NodeAgent("node1", tmp_path, backend, isolation_mode="mps")
    daemons = agent.isolator.mps.daemons
    a = agent.isolate(9, BATCH_STEP, 1000, SHARD2)
    pipe = daemons.dirs("gpu0")[0]
    assert a.env["CUDA_MPS_PIPE_DIRECTORY"] == str(pipe) and daemons.pid("gpu0")
    assert daemon_state(pipe)["default_pct"] == 40  # 2 of the H100's 5 shares
    b = agent.isolate(10, BATCH_STEP, 1000, SHARD1)
    assert b.env["CUDA_MPS_PIPE_DIRECTORY"] == str(pipe)
    # the daemon's limits are the larger job's; each job's environment lowers its own
    state = daemon_state(pipe)
    assert state["default_pct"] == 40 and state["default_pinned"] == {"0": mib_floor(a.mem_limit_bytes)}
    assert b.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "20"
    pid = daemons.pid("gpu0")
    agent.finish(9)
    assert daemons.pid("gpu0") == pid  # job 10 still uses it, now with its own (smaller) share
    assert daemon_state(pipe)["default_pinned"] == {"0": mib_floor(b.mem_limit_bytes)}
    agent.finish(10)
    assert daemons.pid("gpu0") is None


def test_the_agent_restarts_a_dead_daemon_and_stops_an_orphan(tmp_path):
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB", "H100-80GB"], mig_enabled=False)
    agent = NodeAgent("node1", tmp_path, backend, isolation_mode="mps")
    daemons = agent.isolator.mps.daemons
    agent.isolate(9, BATCH_STEP, 1000, SHARD2)
    os.kill(daemons.pid("gpu0"), signal.SIGKILL)
    orphan = MpsDaemons(daemons.root).ensure("gpu1", backend.list_gpus()[1].uuid, MpsLimits(50, 10))
    _wait_gone(daemons, "gpu0")
    done = agent.reconcile()
    assert "MPS daemon gpu0 died; started again with its limits" in done
    assert "MPS daemon gpu1 stopped: no MPS job uses it" in done
    assert daemons.pid("gpu0") and daemons.pid("gpu1") is None and orphan.key == "gpu1"


def _hostile_env(tmp_path, backend, a, **extra) -> dict:
    env = {"GPUPACK_SIM_DIR": str(tmp_path / "sim"), "GPUPACK_NODE": "node1", **a.env, **extra}
    env.pop("GPUPACK_MEM_LIMIT_BYTES", None)  # the workload's own fence: gone, as a user could
    env.pop("GPUPACK_AGENT_SOCKET", None)
    return env


def test_an_mps_client_cannot_lift_the_daemons_memory_limit(tmp_path):
    """The MPS limit is set in the daemon and the GPU holds the client to it: a client that
    raises CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (and drops the agent's variable) is refused past
    its share; the same allocation without a daemon on that pipe goes through."""
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB"], mig_enabled=False)
    agent = NodeAgent("node1", tmp_path, backend, isolation_mode="mps")
    a = agent.isolate(9, BATCH_STEP, os.getuid(), SHARD2)
    assert 31 * GIB < a.mem_limit_bytes < 32 * GIB  # 2 of 5 shares of the H100's memory
    env = _hostile_env(tmp_path, backend, a, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=80G")
    err = io.StringIO()
    status = workload.run(mem_start=40 * GIB, mem_growth=0, iters=1, iter_ms=1, workload=None, env=env,
                          report=False, out=io.StringIO(), err=err, backend=backend)
    assert status == 1 and "CUDA out of memory" in err.getvalue()
    assert backend.memory_of(str(os.getpid())) == {} or all(
        r["current"] == 0 for r in backend.memory_of(str(os.getpid())).values())
    # within its limit it runs, as an MPS client of the daemon's server
    assert workload.run(mem_start=30 * GIB, mem_growth=0, iters=1, iter_ms=1, workload=None, env=env,
                        report=False, out=io.StringIO(), err=io.StringIO(), backend=backend) == 0
    # no daemon on the pipe (as before the agent ran one): nothing holds the client back
    agent.finish(9)
    backend.forget(str(os.getpid()))
    assert workload.run(mem_start=40 * GIB, mem_growth=0, iters=1, iter_ms=1, workload=None, env=env,
                        report=False, out=io.StringIO(), err=io.StringIO(), backend=backend) == 0


def test_a_second_user_is_refused_by_the_daemon_while_the_first_has_clients(tmp_path):
    daemons = MpsDaemons(tmp_path)
    d = daemons.ensure("gpu0", "GPU-abc", MpsLimits(40, 1024))
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(d.pipe)}
    connect_client(env, 1000, os.getpid())
    with pytest.raises(AgentError, match="uid 1000 has clients"):
        daemons.command(d, "start_server -uid 1001")
    from gpus.sim.mps_state import MpsRefused

    with pytest.raises(MpsRefused, match="uid 1000 has clients"):
        connect_client(env, 1001, os.getppid())


def test_mps_inside_a_mig_instance_beside_another_instance(tmp_path):
    """Small jobs share one MIG instance through MPS: a daemon of its own for the instance
    (CUDA_VISIBLE_DEVICES its MIG UUID), whose limit the simulated GPU holds its clients to,
    while another instance of the same GPU serves a job of its own."""
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB"], mig_enabled=True)
    pool = backend.create_instance(0, "3g.40gb", 4)
    other = backend.create_instance(0, "2g.20gb", 0)
    daemons = MpsDaemons(tmp_path / "mps")
    half = pool.memory_mib // 2
    d = daemons.ensure(f"gpu0-gi{pool.gi_id}", pool.uuid, MpsLimits(50, half))
    assert f"CUDA_VISIBLE_DEVICES={pool.uuid}" in (d.logs / "control.log").read_text()
    env = {"GPUPACK_SIM_DIR": str(tmp_path / "sim"), "GPUPACK_NODE": "node1", "GPUPACK_SIM_DEVICE": pool.uuid,
           "CUDA_VISIBLE_DEVICES": pool.uuid, "CUDA_MPS_PIPE_DIRECTORY": str(d.pipe),
           "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40G"}  # asks for more than the daemon allows
    quiet = dict(mem_growth=0, iters=1, iter_ms=1, workload=None, report=False, out=io.StringIO(), backend=backend)
    err = io.StringIO()
    assert workload.run(mem_start=(half + 1024) << 20, env=env, err=err, **quiet) == 1
    assert "CUDA out of memory" in err.getvalue()
    assert workload.run(mem_start=(half - 1024) << 20, env=env, err=io.StringIO(), **quiet) == 0
    # the other instance is not the daemon's: a plain process there uses all of it
    backend.alloc_memory(other.uuid, "job-7", (other.memory_mib - 1) << 20)
    assert daemon_state(d.pipe)["servers"][0]["pinned"] == {"0": half << 20}
    daemons.stop(f"gpu0-gi{pool.gi_id}")
    assert daemons.pid(f"gpu0-gi{pool.gi_id}") is None


def test_small_jobs_of_one_user_share_a_mig_instance_through_mps(tmp_path):
    """A MIG node with mps_in_mig_shares=3: jobs of fewer than 3 shares share a MIG instance
    sized for 3 shares through MPS, one user per instance, one daemon per instance, beside
    the GPU's other instances; the instance and its daemon go with its last job."""
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB"], mig_enabled=True)
    agent = NodeAgent("node1", tmp_path, backend, mps_in_mig_shares=3)
    daemons = agent.isolator.mps.daemons
    a = agent.isolate(9, BATCH_STEP, 1000, SHARD1)
    assert a.kind == "mps" and a.gi_id is not None and a.env["CUDA_VISIBLE_DEVICES"] == a.device_uuid
    assert a.device_uuid.startswith("MIG-") and a.isolation.startswith("mps:33@")
    key = f"gpu0-gi{a.gi_id}"
    assert a.env["CUDA_MPS_PIPE_DIRECTORY"] == str(daemons.dirs(key)[0]) and daemons.pid(key)
    assert f"CUDA_VISIBLE_DEVICES={a.device_uuid}" in (daemons.dirs(key)[1] / "control.log").read_text()
    b = agent.isolate(10, BATCH_STEP, 1000, SHARD2)  # same user, 1 + 2 shares fit: the same instance
    assert (b.kind, b.device_uuid, b.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) == ("mps", a.device_uuid, "67")
    c = agent.isolate(11, BATCH_STEP, 1001, SHARD1)  # another user: an instance (and daemon) of its own
    assert c.device_uuid != a.device_uuid and daemons.pid(f"gpu0-gi{c.gi_id}")
    assert len(backend.list_instances(0)) == 2
    inst = next(i for i in backend.list_instances(0) if i.uuid == a.device_uuid)
    state = daemon_state(daemons.dirs(key)[0])
    assert state["default_pct"] == 67 and state["default_pinned"] == {"0": mib_floor(b.mem_limit_bytes)}
    assert b.mem_limit_bytes == int((inst.memory_mib << 20) * 2 / 3)  # 2 of the instance's 3 shares
    agent.finish(9)  # the instance stays with job 10, which now owns it
    inst = next(i for i in backend.list_instances(0) if i.uuid == a.device_uuid)
    assert inst.owner == "10" and daemons.pid(key)
    assert {r["job"] for r in agent.journal_view()["held"] if r["uuid"] == a.device_uuid} == {10}
    agent.finish(10)
    assert a.device_uuid not in {i.uuid for i in backend.list_instances(0)} and daemons.pid(key) is None
    agent.finish(11)


def test_the_helpers_plan_for_a_mig_instance_reaches_its_jobs_and_its_daemon(tmp_path):
    """The helper's measured MPS plan names the MIG instance the jobs share through MPS
    (``0@profile@start``, percentages counted within it): a later step of each job starts
    with its planned share, the instance's daemon takes the largest, and a plan for the GPU
    (or for another instance) does not touch these jobs."""
    from slurm_plugin.agent.ops import dispatch
    from slurm_plugin.agent.trust import Peer

    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB"], mig_enabled=True)
    agent = NodeAgent("node1", tmp_path, backend, mps_in_mig_shares=3)
    a = agent.isolate(9, BATCH_STEP, 1000, SHARD1)
    b = agent.isolate(10, BATCH_STEP, 1000, SHARD1)
    key, where = f"gpu0-gi{a.gi_id}", f"{a.profile}@{a.start}"
    assert b.device_uuid == a.device_uuid and a.isolation == f"mps:33@{where}"
    dispatch(agent, "mps_plan", {"plan": {"0": {"9": 90, "10": 10}}, "generation": 1}, Peer(0, 0, 0))
    assert agent.isolate(9, 0, 1000, SHARD1).env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "33"  # not the GPU's
    dispatch(agent, "mps_plan", {"plan": {f"0@{where}": {"9": 75, "10": 25}}, "generation": 2}, Peer(0, 0, 0))
    a2, b2 = agent.isolate(9, 0, 1000, SHARD1), agent.isolate(10, 0, 1000, SHARD1)
    assert (a2.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], b2.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) == ("75", "25")
    assert a2.isolation == f"mps:75@{where}" and b2.isolation == f"mps:25@{where}"  # still the instance's
    state = daemon_state(agent.isolator.mps.daemons.dirs(key)[0])
    assert state["default_pct"] == 75 and [s["active_thread_pct"] for s in state["servers"]] == [75]
    c = agent.isolate(11, BATCH_STEP, 1000, SHARD1)  # joins with the plan's room: its shares' default
    assert c.device_uuid == a.device_uuid and c.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "33"
    for job in (9, 10, 11):
        agent.finish(job)


def test_an_mps_shared_instance_gone_after_a_driver_reload_is_reconciled(tmp_path):
    """The agent restarts after a driver reload that took the MPS-shared MIG instance: its
    jobs are noted lost as a plain slice's job is, the instance's daemon is stopped and its
    compute-mode mark cleared; a new small job gets a new instance and daemon."""
    from slurm_plugin.agent.exclusive_mode import MARK

    backend = SimGpuBackend(tmp_path / "sim", "node1", gpus=["H100-80GB"], mig_enabled=True)
    first = NodeAgent("node1", tmp_path, backend, mps_in_mig_shares=3, list_running_jobs=lambda: {9, 10, 11})
    a = first.isolate(9, BATCH_STEP, 1000, SHARD1)
    first.isolate(10, BATCH_STEP, 1000, SHARD1)
    key = f"gpu0-gi{a.gi_id}"
    daemons = first.isolator.mps.daemons
    assert daemons.pid(key) and (daemons.root / key / MARK).exists()
    backend.set_owner(0, a.gi_id, None)  # the driver reload: every MIG instance gone
    backend.destroy_instance(0, a.gi_id)
    second = NodeAgent("node1", tmp_path, backend, mps_in_mig_shares=3, list_running_jobs=lambda: {9, 10, 11})
    done = second.reconcile(at_start=True)
    assert {f"job {j}: its {a.profile}@{a.start} is gone from GPU 0" for j in (9, 10)} <= set(done), done
    assert f"MPS daemon {key} stopped: no MPS job uses it" in done
    assert daemons.pid(key) is None and not (daemons.root / key / MARK).exists()
    for job in (9, 10):
        lost = second.jobs[job]
        assert lost.device_uuid is None and lost.gi_id is None and any("missing" in n for n in lost.notes)
    assert second.reconcile(at_start=False) == []  # nothing to start again for the lost jobs
    c = second.isolate(11, BATCH_STEP, 1000, SHARD1)
    assert c.device_uuid and second.isolator.mps.daemons.pid(f"gpu0-gi{c.gi_id}")
    for job in (9, 10, 11):
        second.finish(job)
    assert not second.isolator.mps.daemons.running_keys()


def test_instances_gone_under_a_running_agent_are_reconciled_the_next_round(tmp_path):
    """A GPU reset (or an admin's `nvidia-smi mig -dgi`) takes the MIG instances while the agent
    runs: its next reconcile notes the jobs of a plain slice and of an MPS-shared instance lost,
    stops that instance's daemon and clears its compute-mode mark, once; a job whose slice is
    still there is untouched."""
    from slurm_plugin.agent.exclusive_mode import MARK

    backend = SimGpuBackend(tmp_path / "sim", "node1", gpus=["H100-80GB"], mig_enabled=True)
    agent = NodeAgent("node1", tmp_path, backend, mps_in_mig_shares=2, list_running_jobs=lambda: {9, 10, 12})
    a = agent.isolate(9, BATCH_STEP, 1000, SHARD1)  # MPS inside a MIG instance
    plain = agent.isolate(10, BATCH_STEP, 1000, SHARD2)
    kept = agent.isolate(12, BATCH_STEP, 1000, SHARD2)
    assert a.kind == "mps" and plain.kind == kept.kind == "mig"
    key = f"gpu0-gi{a.gi_id}"
    daemons = agent.isolator.mps.daemons
    assert agent.reconcile() == [] and daemons.pid(key)
    for gi in (a.gi_id, plain.gi_id):  # the reset, as far as these two are concerned
        backend.set_owner(0, gi, None)
        backend.destroy_instance(0, gi)
    real_list = backend.list_instances
    backend.list_instances = lambda gpu: (_ for _ in ()).throw(MigError("NVML: GPU is lost"))
    assert agent.reconcile() == [] and daemons.pid(key)  # not listed: nothing concluded
    backend.list_instances = real_list
    done = agent.reconcile()
    assert {f"job 9: its {a.profile}@{a.start} is gone from GPU 0",
            f"job 10: its {plain.profile}@{plain.start} is gone from GPU 0",
            f"MPS daemon {key} stopped: no MPS job uses it"} <= set(done), done
    assert not any("job 12" in line for line in done)
    assert daemons.pid(key) is None and not (daemons.root / key / MARK).exists()
    assert any("gone from the GPU while the agent ran" in n for n in agent.jobs[10].notes)
    assert agent.jobs[12].gi_id == kept.gi_id and agent.jobs[12].device_uuid == kept.device_uuid
    assert agent.reconcile() == []  # said once
    for job in (9, 10, 12):
        agent.finish(job)


def test_the_server_started_up_front_is_kept_by_a_restarted_agent(tmp_path):
    """The agent starts the user's server with the share; an agent restarted beside the
    running daemon finds that server (the daemon runs one user's jobs) and starts none."""
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB"], mig_enabled=False)
    first = NodeAgent("node1", tmp_path, backend, isolation_mode="mps", list_running_jobs=lambda: {9})
    first.isolate(9, BATCH_STEP, 1000, SHARD2)
    pipe, logs = first.isolator.mps.daemons.dirs("gpu0")
    (server,) = daemon_state(pipe)["servers"]
    assert server["uid"] == 1000 and server["clients"] == [] and server["active_thread_pct"] == 40
    second = NodeAgent("node1", tmp_path, backend, isolation_mode="mps", list_running_jobs=lambda: {9})
    second.reconcile(at_start=True)
    assert second.isolator.mps.daemons.daemons["gpu0"].server_uid == 1000
    assert [s["pid"] for s in daemon_state(pipe)["servers"]] == [server["pid"]]
    assert (logs / "control.log").read_text().count("start_server -uid 1000") == 1
    second.finish(9)
    assert second.isolator.mps.daemons.pid("gpu0") is None
