"""The MIG fence holds against the job's own user (issue 21, item 5): a packed job that points
CUDA_VISIBLE_DEVICES at another job's MIG slice cannot use it, because its task cannot open
that slice's capability nodes (the SPANK plugin's mount namespace, docs/fence.md); the other
job runs on undisturbed. Nor can it through the hole the namespace leaves: the node's own
capability nodes, seen under /proc/<pid>/root of a process of the same user that runs outside
any fence (an unpacked job's task here), are denied by the packed task's device cgroup (EPERM)."""
from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from e2e_support import PY, wait_for
from slurm_plugin.agent.fence import device_cgroup_roots

pytestmark = pytest.mark.integration
DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}


def _read(path) -> str:
    try:
        return path.read_text()
    except OSError:
        return "(none)"


def test_a_packed_job_cannot_use_another_jobs_mig_slice(cluster):
    wd = cluster.workdir
    tag = time.time_ns()
    a_env, b_out = wd / f"fence-a-env-{tag}.txt", wd / f"fence-b-{tag}.txt"
    outside_pid = wd / f"fence-outside-{tag}.pid"
    outside = cluster.submit(["-w", "node1", "-J", "fence-outside"], (  # no GPU: no fence
        f"#!/bin/sh\necho $$ > {outside_pid}.tmp && mv {outside_pid}.tmp {outside_pid}\nexec sleep 60\n").encode())
    victim = cluster.submit(["--gres=shard:1", "-w", "node1", "-J", "fence-victim"], (
        "#!/bin/sh\n"
        f"env | grep -E '^(CUDA_VISIBLE_DEVICES|GPUPACK_SIM_DEVICE)=' > {a_env}.tmp && mv {a_env}.tmp {a_env}\n"
        f"exec {PY} -m slurm_plugin simgpu run --mem-start 1GiB --iters 60 --iter-ms 100 --no-report\n").encode())
    # the intruder waits for the victim's device, then asks CUDA for it (as a user may: both
    # the variable CUDA reads and the one the simulated workload prefers), then for its own
    hostile = cluster.submit(["--gres=shard:1", "-w", "node1", "-J", "fence-intruder"], (
        "#!/bin/sh\n"
        f"while [ ! -s {a_env} ]; do sleep 0.2; done\n"
        f"theirs=$(sed -n 's/^CUDA_VISIBLE_DEVICES=//p' {a_env})\n"
        f"CUDA_VISIBLE_DEVICES=$theirs GPUPACK_SIM_DEVICE=$theirs {PY} -m slurm_plugin simgpu run "
        f"--mem-start 1GiB --iters 3 --iter-ms 50 --no-report > {b_out}.theirs 2>&1\n"
        f"echo \"theirs=$? $theirs\" > {b_out}.tmp\n"
        f"{PY} -m slurm_plugin simgpu run --mem-start 1GiB --iters 3 --iter-ms 50 --no-report > {b_out}.own 2>&1\n"
        f"echo \"own=$? $CUDA_VISIBLE_DEVICES\" >> {b_out}.tmp\n"
        # the hole: the victim's nodes through the root of a process outside the namespace, as
        # a program that redirects open() would reach them (the simulated GPU's folder moved there)
        f"while [ ! -s {outside_pid} ]; do sleep 0.2; done\n"
        f"GPUPACK_SIM_DIR=/proc/$(cat {outside_pid})/root{cluster.spec.simgpu_dir} CUDA_VISIBLE_DEVICES=$theirs "
        f"GPUPACK_SIM_DEVICE=$theirs {PY} -m slurm_plugin simgpu run --mem-start 1GiB --iters 3 --iter-ms 50 "
        f"--no-report > {b_out}.hole 2>&1\n"
        f"echo \"hole=$? $theirs\" >> {b_out}.tmp && mv {b_out}.tmp {b_out}\n").encode())
    explain = lambda: f"intruder {_read(b_out)} / {_read(wd / f'fence-b-{tag}.txt.theirs')}"  # noqa: E731
    result = wait_for(lambda: b_out.exists() and b_out.read_text(), 40, "the intruder's three runs", explain=explain)
    rows = {k: v for k, v in (line.split("=", 1) for line in result.splitlines())}
    theirs_rc, theirs_dev = rows["theirs"].split(" ", 1)
    own_rc, own_dev = rows["own"].split(" ", 1)
    victim_dev = _read(a_env).splitlines()[0].split("=", 1)[1]
    assert theirs_dev == victim_dev and own_dev.startswith("MIG-") and own_dev != victim_dev, result
    said = _read(wd / f"fence-b-{tag}.txt.theirs")
    assert theirs_rc == "2" and "no CUDA-capable device is detected" in said and "cannot open" in said, said
    assert own_rc == "0", _read(wd / f"fence-b-{tag}.txt.own")  # its own slice it may use
    cluster.run("scancel", str(outside))
    assert cluster.wait(hostile, DONE, timeout=30) == "COMPLETED"
    assert cluster.wait(victim, DONE, timeout=40) == "COMPLETED"
    # slurmd said at its start which device cgroup the node's fences use (the v2 one was probed)
    started = (cluster.spec.log / "slurmd-node1.log").read_text(errors="replace")
    assert "gpupack: MIG fences on this node deny capability nodes through " + (
        "a cgroup v2 BPF device program" if os.environ.get("GPUPACK_DEVCLUSTER_CGROUP") == "v2"
        else "the cgroup v") in started or _no_device_cgroup(cluster), started[-2000:]
    hole_rc, hole_dev = rows["hole"].split(" ", 1)
    said = _read(wd / f"fence-b-{tag}.txt.hole")
    if hole_rc == "0" and (why := _no_device_cgroup(cluster)):
        pytest.skip(f"the namespace's hole stays open here: {why}")
    assert hole_dev == victim_dev and hole_rc == "2" and "cannot open its capability /proc/" in said \
        and "Operation not permitted" in said, said  # EPERM: the device cgroup, not a missing file


def _no_device_cgroup(cluster) -> str | None:
    """Why no device cgroup can refuse the simulated nodes here (None: it can)."""
    if not device_cgroup_roots(Path("/proc/self/mountinfo").read_text()):
        return "neither the cgroup v1 devices controller nor cgroup v2 (docs/fence.md)"
    caps = cluster.node_path("node1", cluster.spec.simgpu_dir / "node1.driver" / "dev" / "nvidia-caps")
    if any(not stat.S_ISCHR(p.stat().st_mode) for p in caps.glob("nvidia-cap*")):
        return "the simulated capability nodes are regular files (no device node could be made)"
    return None
