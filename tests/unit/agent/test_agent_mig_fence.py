"""The agent's MIG fence answer: the capability nodes of the job's own instance, read from the
driver's files; no answer but a refusal when they cannot be read."""
from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpus.nvml.caps import DriverFiles, mig_minor
from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent import isolation as iso
from slurm_plugin.agent.daemon import NodeAgent
from gpus.sim.caps import SIM_CAPS_MAJOR
from slurm_plugin.agent.fence import deny_ranges, device_cgroup_roots, prune_device_cgroups
from slurm_plugin.agent.paths import AgentError
from slurm_plugin.agent.state import BATCH_STEP
from simjobs import workload

SHARDS = {"SLURM_JOB_GPUS": "1", "SLURM_SHARDS_ON_NODE": "1"}


def _agent(tmp_path):
    sim = tmp_path / "simgpu"
    return NodeAgent("n1", tmp_path / "agent", SimGpuBackend(sim, "n1", gpus=["H100-80GB"] * 2), sim_dir=sim)


def test_a_mig_job_is_fenced_to_its_own_instance(tmp_path):
    agent = _agent(tmp_path)
    a = agent.isolate(7, BATCH_STEP, 0, SHARDS)
    b = agent.isolate(8, BATCH_STEP, 0, SHARDS)
    fa, fb = agent.fence(a), agent.fence(b)
    caps = str(tmp_path / "simgpu" / "n1.driver" / "dev" / "nvidia-caps")
    own = {mig_minor(1, a.gi_id), mig_minor(1, a.gi_id, 0)}
    assert fa.directory == caps and fa.allowed == tuple(f"nvidia-cap{m}" for m in sorted(own))
    assert not set(fa.allowed) & set(fb.allowed)  # the other job's nodes are not the first's
    # the device cgroup's part: every MIG capability of the node's two GPUs but its own two
    assert fa.caps_major == SIM_CAPS_MAJOR
    denied = {m for lo, hi in fa.deny for m in range(lo, hi + 1)}
    assert denied == set(range(3, mig_minor(2, 0))) - own
    assert {mig_minor(1, b.gi_id), mig_minor(1, b.gi_id, 0)} <= denied
    text = iso.answer_lines(a.isolation, a.env, fa.to_dict())
    assert text.splitlines()[1] == f"FENCE {','.join(fa.allowed)} {caps}"
    assert text.splitlines()[2] == "DENY 61 " + ",".join(f"{lo}-{hi}" for lo, hi in fa.deny)
    whole = agent.isolate(9, BATCH_STEP, 0, {"SLURM_JOB_GPUS": "0"})
    assert whole.gi_id is not None and agent.fence(whole).allowed  # a whole GPU in MIG mode: its full instance


def test_no_fence_no_answer(tmp_path):
    agent = _agent(tmp_path)
    a = agent.isolate(7, BATCH_STEP, 0, SHARDS)
    shutil.rmtree(DriverFiles.for_node(tmp_path / "simgpu", "n1").proc_caps)
    with pytest.raises(AgentError, match=r"cannot fence job 7 to its MIG instance .*gpu1/gi\d+/access"):
        agent.fence(a)


def test_no_caps_major_no_answer(tmp_path):
    agent = _agent(tmp_path)
    a = agent.isolate(7, BATCH_STEP, 0, SHARDS)
    DriverFiles.for_node(tmp_path / "simgpu", "n1").devices.write_text("Character devices:\n195 nvidia\n")
    with pytest.raises(AgentError, match=r"job 7 in its device cgroup: .*no character device 'nvidia-caps'"):
        agent.fence(a)


def test_deny_ranges_and_line():
    assert deny_ranges([3, 4, 5, 6, 9, 10, 12], {5, 12}) == ((3, 4), (6, 6), (9, 10))
    assert deny_ranges([3, 4], {3, 4}) == ()
    assert iso.deny_line(235, ((3, 4), (6, 6))) == "DENY 235 3-4,6-6"
    assert iso.deny_line(235, ()) == "DENY 235 -"


def test_the_fence_line_refuses_what_the_plugin_could_misread():
    for bad in (["a,b"], ["x y"], ["../nvidia-cap1"], []):
        with pytest.raises(ValueError):
            iso.answer_lines("mig:1g.10gb@0", {}, {"directory": "/dev/nvidia-caps", "allowed": bad})


def test_device_cgroups_of_gone_step_daemons_are_pruned(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    proc = tmp_path / "proc"
    (proc / str(os.getpid())).mkdir(parents=True)  # a live step daemon; the other is gone
    root, v2 = tmp_path / "devices", tmp_path / "unified"
    dead = root / "gpupack" / f"job5_step0_{gone.pid}"
    live = root / "gpupack" / f"job6_step0_{os.getpid()}"
    service = root / "system.slice" / "slurmd.service" / "gpupack" / f"job7_step4294967291_{gone.pid}"
    busy = root / "gpupack" / "job8_step0_999999999"
    dead2 = v2 / "system.slice" / "slurmd.service" / "gpupack" / f"job9_step0_{gone.pid}"  # cgroup v2's
    for d in (dead, live, service, busy / "child", dead2):
        d.mkdir(parents=True)
    done = prune_device_cgroups([root, v2], proc)
    assert not dead.exists() and not service.exists() and not dead2.exists() and len(done) == 3
    assert live.exists() and busy.exists()  # its step daemon runs / a process (here: a child) holds it


# /proc/self/mountinfo of a hybrid host (systemd's legacy layout: v1 controllers and the v2 tree in
# unified/) and of a pure cgroup v2 host (Debian 12's default), trimmed to the cgroup lines
HYBRID = """31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
PURE_V2 = """25 30 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
"""


def test_device_cgroup_roots_are_the_v1_devices_and_the_v2_mounts():
    assert device_cgroup_roots(HYBRID) == [Path("/sys/fs/cgroup/devices"), Path("/sys/fs/cgroup/unified")]
    assert device_cgroup_roots(PURE_V2) == [Path("/sys/fs/cgroup")]
    assert device_cgroup_roots("garbage line\n") == []


def test_the_fence_names_a_gpu_by_its_device_minor_not_its_nvml_index(tmp_path, monkeypatch):
    """The driver's capability files name a GPU by its /dev/nvidia<minor>, which need not follow
    NVML's index order: the agent asks NVML (nvmlDeviceGetMinorNumber) and fences the job on
    NVML's GPU 1 to the nodes of the driver's gpu0 when that GPU's minor is 0."""
    import pynvml

    from gpus.nvml.backend import NvmlBackend
    from gpus.sim.nvml import SimulatedNvml

    sim = tmp_path / "simgpu"
    store = SimGpuBackend(sim, "n1", gpus=["H100-80GB"] * 2)
    with store._txn(write=True) as doc:  # the driver numbered them the other way round
        doc["gpus"][0]["minor"], doc["gpus"][1]["minor"] = 1, 0
    lib = SimulatedNvml(sim, "n1")
    lib.install(monkeypatch)
    backend = NvmlBackend()
    assert [pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in (0, 1)] == [1, 0]
    agent = NodeAgent("n1", tmp_path / "agent", backend, sim_dir=sim)
    a = agent.isolate(7, BATCH_STEP, 0, SHARDS)  # SLURM_JOB_GPUS=1: NVML's GPU 1
    assert a.gpu_index == 1
    fa = agent.fence(a)
    assert fa.allowed == (f"nvidia-cap{mig_minor(0, a.gi_id)}", f"nvidia-cap{mig_minor(0, a.gi_id, 0)}")
    driver = DriverFiles.for_node(sim, "n1")
    assert all(n.exists() for n in driver.mig_devices(0, a.gi_id, 0))  # the simulated driver agrees
    assert not (driver.proc_caps / "gpu1" / "mig" / f"gi{a.gi_id}").exists()
    # and the simulated CUDA opens the nodes of the driver's gpu0 for that slice
    err = io.StringIO()
    rc = workload.run(mem_start=1 << 30, mem_growth=0, iters=1, iter_ms=0, workload=None, out=io.StringIO(),
                      err=err, env={"GPUPACK_SIM_DIR": str(sim), "GPUPACK_NODE": "n1",
                                    "GPUPACK_SIM_DEVICE": a.device_uuid}, backend=store, report_every_s=0)
    assert rc == 0, err.getvalue()
    agent.finish(7)
    backend.close()
    assert not lib.violations and not lib.errors
