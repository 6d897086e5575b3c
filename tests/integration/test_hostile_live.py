"""A hostile user steers nothing from inside a job, on the multi-host cluster.

Every privileged act rests on what Slurm allocated or the node measured, never on the job's
environment or its exit code:

- a `SLURM_STEP_GPUS` (and `CUDA_VISIBLE_DEVICES`) exported at `sbatch` time, which Slurm neither
  sets nor clears in a batch step, does not choose the GPU a packed job is isolated on;
- a job that exits 117 by itself (the code the SPANK plugin's "could not isolate" end uses) is an
  ordinary failed job: not requeued, not lifted;
- a `SLURMD_NODENAME` exported at `sbatch` time does not point the SPANK plugin at another
  node's agent: the packed job runs isolated on its own node.
"""
from __future__ import annotations

import subprocess
import time

import pytest

from e2e_support import events, through_rounds
from slurm_plugin.helper.watches.unisolated import KIND as UNISOLATED
from slurm_plugin.slurm.gres import allocated_gpus
from slurm_plugin.slurm.runner import SlurmRunner

pytestmark = pytest.mark.integration
DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}
SLEEP = b"#!/bin/sh\nsleep 300\n"


def submit_with(cluster, env: dict[str, str], args: list[str], script: bytes) -> int:
    """sbatch with extra variables in the submitter's environment (propagated to the job)."""
    out = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", *args], input=script, capture_output=True,
                         env={**cluster.env, **env}, cwd=cluster.workdir, timeout=60)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    return int(out.stdout.decode().strip().split(";")[0])


def slurm_gpus(cluster, job_id: int, node: str) -> tuple[int, ...]:
    return allocated_gpus(SlurmRunner(env=cluster.env).job(job_id)).get(node, ())


def test_an_exported_step_gpus_does_not_choose_a_packed_jobs_gpu(idle_cluster):
    cluster, node = idle_cluster, "node3"
    whole = cluster.submit(["-J", "hostile-whole", "-w", node, "--gres=gpu:1"], SLEEP)
    cluster.wait(whole, "RUNNING", 30)
    (held,) = slurm_gpus(cluster, whole, node)  # another job holds this GPU whole
    seen = cluster.workdir / f"hostile-gpu-{time.time_ns()}"
    script = f"#!/bin/sh\necho \"$GPUPACK_GPU_INDEX $GPUPACK_ISOLATION\" > {seen}\n".encode()
    job = submit_with(cluster, {"SLURM_STEP_GPUS": str(held), "CUDA_VISIBLE_DEVICES": str(held)},
                      ["-J", "hostile-steer", "-w", node, "--gres=shard:1"], script)
    assert cluster.wait(job, DONE, 120) == "COMPLETED"
    (given,) = slurm_gpus(cluster, job, node) or (None,)
    index, isolation = seen.read_text().split()
    assert int(index) != held and (given is None or int(index) == given), (index, held, given)
    assert isolation.startswith("mig:")
    assert cluster.state(whole) == "RUNNING"


def test_a_job_that_exits_117_by_itself_is_neither_requeued_nor_lifted(idle_cluster):
    cluster = idle_cluster
    script = f"#!/bin/sh\n: 'hostile 117 {time.time_ns()}'\nexit 117\n".encode()
    jobs = [cluster.submit(["-J", "hostile-117-cpu"], script),
            cluster.submit(["-J", "hostile-117-packed", "--gres=shard:1"], script)]
    for job in jobs:
        assert cluster.wait(job, DONE, 60) == "FAILED"

    def ordinary_failures() -> None:
        for job in jobs:
            info = cluster.job(job)
            assert info["JobState"] == "FAILED" and info["ExitCode"] == "117:0", info
            assert int(info["Restarts"]) == 0 and info["Nice"] == "0", info
            assert not events(cluster, UNISOLATED, job)

    through_rounds(cluster, ordinary_failures, rounds=2)  # the watcher's rounds ran and did nothing


def test_an_exported_node_name_does_not_point_the_plugin_at_another_node(idle_cluster):
    cluster, node = idle_cluster, "node2"
    seen = cluster.workdir / f"hostile-node-{time.time_ns()}"
    script = f"#!/bin/sh\necho \"$GPUPACK_ISOLATION\" > {seen}\n".encode()
    job = submit_with(cluster, {"SLURMD_NODENAME": "node1"}, ["-J", "hostile-node", "-w", node, "--gres=shard:1"], script)
    assert cluster.wait(job, DONE, 120) == "COMPLETED"
    info = cluster.job(job)
    assert int(info["Restarts"]) == 0 and info["ExitCode"] == "0:0", info
    assert seen.read_text().strip().startswith("mig:")
