"""The MIG fence holds against the job's own user (issue 21, item 5): a packed job that points
CUDA_VISIBLE_DEVICES at another job's MIG slice cannot use it, because its task cannot open
that slice's capability nodes (the SPANK plugin's mount namespace, docs/fence.md); the other
job runs on undisturbed."""
from __future__ import annotations

import time

import pytest

from e2e_support import PY, wait_for

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
        f"echo \"own=$? $CUDA_VISIBLE_DEVICES\" >> {b_out}.tmp && mv {b_out}.tmp {b_out}\n").encode())
    explain = lambda: f"intruder {_read(b_out)} / {_read(wd / f'fence-b-{tag}.txt.theirs')}"  # noqa: E731
    result = wait_for(lambda: b_out.exists() and b_out.read_text(), 40, "the intruder's two runs", explain=explain)
    rows = {k: v for k, v in (line.split("=", 1) for line in result.splitlines())}
    theirs_rc, theirs_dev = rows["theirs"].split(" ", 1)
    own_rc, own_dev = rows["own"].split(" ", 1)
    victim_dev = _read(a_env).splitlines()[0].split("=", 1)[1]
    assert theirs_dev == victim_dev and own_dev.startswith("MIG-") and own_dev != victim_dev, result
    said = _read(wd / f"fence-b-{tag}.txt.theirs")
    assert theirs_rc == "2" and "no CUDA-capable device is detected" in said and "cannot open" in said, said
    assert own_rc == "0", _read(wd / f"fence-b-{tag}.txt.own")  # its own slice it may use
    assert cluster.wait(hostile, DONE, timeout=30) == "COMPLETED"
    assert cluster.wait(victim, DONE, timeout=40) == "COMPLETED"
