"""MPS for real on the dev cluster: node3's agent in MPS mode runs one MPS control daemon
(the simulated GPU's stand-in for nvidia-cuda-mps-control) for GPU 0 while two packed jobs
of one user share it, sets their limits in it, and quits it after the last job ends; a step
that raises its own memory limit is still refused past its share by the simulated GPU, and a
step run with the MPS variables unset is refused by the GPU, which the agent put in
exclusive-process compute mode."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from e2e_support import PY, mps_agent, wait_for

pytestmark = pytest.mark.integration
DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}
NODE = "node3"


# in the job: until an MPS client of the job's GPU has its context on the simulated GPU
WAIT_MPS_CLIENT = """import json, os, time
state = os.path.join(os.environ["GPUPACK_SIM_DIR"], os.environ["GPUPACK_NODE"] + ".json")
device = os.environ["GPUPACK_SIM_DEVICE"]
def held():
    try:
        doc = json.load(open(state))
    except (OSError, ValueError):
        return False
    return any(p.get("mps") for g in doc["gpus"] for p in g.get("processes", {}).get(device, {}).values())
deadline = time.time() + 60
while not held() and time.time() < deadline:
    time.sleep(0.2)
"""


def test_two_packed_mps_jobs_run_under_one_daemon_with_its_limits(cluster):
    wd = cluster.workdir
    pipe = cluster.node_view(NODE) / "mps" / NODE / "gpu0" / "pipe"
    logs = pipe.parent / "log"

    def daemon() -> dict | None:
        try:
            return json.loads((pipe / "sim-mps.json").read_text())
        except (OSError, ValueError):
            return None

    with mps_agent(cluster, NODE):
        jobs = []
        for n in range(2):
            body = (
                "#!/bin/sh\n"
                f"env | grep -E '^(CUDA_MPS|GPUPACK_MEM)' > {wd}/mpsd-env-$SLURM_JOB_ID.txt\n"
                f"{PY} -m slurm_plugin simgpu run --no-report --mem-start 1GiB --iters 200 --iter-ms 50 "
                f"> {wd}/mpsd-out-$SLURM_JOB_ID.txt 2>&1 &\n"
                # the same job lifts its own limits (its environment is the user's to change):
                # the daemon's limit holds, the simulated GPU refuses 40 GiB of a 2-of-5 share
                + ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=80G GPUPACK_MEM_LIMIT_BYTES= "
                   f"{PY} -m slurm_plugin simgpu run --no-report --mem-start 40GiB --iters 1 --iter-ms 1 "
                   f"> {wd}/mpsd-lift-$SLURM_JOB_ID.txt 2>&1; echo $? > {wd}/mpsd-lift-rc-$SLURM_JOB_ID.txt\n"
                   # and runs a step outside MPS (its variables unset) once an MPS client holds
                   # the GPU: the exclusive-process GPU refuses it
                   f"{PY} - <<'EOF'\n{WAIT_MPS_CLIENT}EOF\n"
                   "env -u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_LOG_DIRECTORY -u CUDA_MPS_PINNED_DEVICE_MEM_LIMIT "
                   f"-u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE {PY} -m slurm_plugin simgpu run --no-report --mem-start 1GiB "
                   f"--iters 1 --iter-ms 1 > {wd}/mpsd-plain-$SLURM_JOB_ID.txt 2>&1; "
                   f"echo $? > {wd}/mpsd-plain-rc-$SLURM_JOB_ID.txt\n"
                   if n == 0 else "")
                + "wait\n"
            ).encode()
            jobs.append(cluster.submit(["-J", "e2e-mpsd", "-w", NODE, "--gres=shard:2"], body))
        for job in jobs:
            cluster.wait(job, "RUNNING", 60)

        lift_rc = wait_for(lambda: (wd / f"mpsd-lift-rc-{jobs[0]}.txt").exists()
                           and (wd / f"mpsd-lift-rc-{jobs[0]}.txt").read_text().strip(), 60,
                           "the step that lifts its own limit ends")
        assert lift_rc == "1", (wd / f"mpsd-lift-{jobs[0]}.txt").read_text()
        assert "CUDA out of memory" in (wd / f"mpsd-lift-{jobs[0]}.txt").read_text()
        plain = wd / f"mpsd-plain-rc-{jobs[0]}.txt"
        plain_rc = wait_for(lambda: plain.exists() and plain.read_text().strip(), 90,
                            "the step outside MPS ends")
        assert plain_rc == "2" and "all CUDA-capable devices are busy or unavailable" in \
            (wd / f"mpsd-plain-{jobs[0]}.txt").read_text(), (wd / f"mpsd-plain-{jobs[0]}.txt").read_text()

        # while both run: one daemon for GPU 0, its defaults the jobs' share (2 of 5: 40 %
        # of the threads, 2/5 of the memory), one server of the jobs' user with both clients
        def serving_both():
            doc = daemon()
            servers = (doc or {}).get("servers", [])
            started = all((wd / f"mpsd-out-{job}.txt").exists() for job in jobs)
            return doc if started and len(servers) == 1 and len(servers[0]["clients"]) == 2 else None

        doc = wait_for(serving_both, 60, "GPU 0's MPS daemon serves both jobs", explain=daemon)
        env = dict(line.split("=", 1) for line in (wd / f"mpsd-env-{jobs[0]}.txt").read_text().splitlines())
        share_bytes = int(env["GPUPACK_MEM_LIMIT_BYTES"])
        assert env["CUDA_MPS_PIPE_DIRECTORY"].endswith(f"mps/{NODE}/gpu0/pipe")
        assert doc["default_pct"] == 40 and doc["default_pinned"] == {"0": share_bytes >> 20 << 20}
        (server,) = doc["servers"]
        assert server["active_thread_pct"] == 40 and server["pinned"] == {"0": share_bytes >> 20 << 20}
        assert f"({server['uid']})" in cluster.job(jobs[0])["UserId"]
        assert (pipe / "nvidia-cuda-mps-control.pid").exists()
        assert "CUDA_VISIBLE_DEVICES=GPU-" in (logs / "control.log").read_text()

        for job in jobs:
            assert cluster.wait(job, DONE, timeout=90) == "COMPLETED", (wd / f"mpsd-out-{job}.txt").read_text()
        # the last MPS job ended: the agent quit the daemon
        wait_for(lambda: not (pipe / "nvidia-cuda-mps-control.pid").exists(), 30,
                 "GPU 0's MPS daemon quits after the last job", explain=daemon)
        text = (logs / "control.log").read_text()
        assert "quit" in text and text.rstrip().endswith("Control daemon exited")


def test_small_jobs_share_a_mig_instance_through_mps(cluster):
    """node3's agent on MIG with --mps-in-mig-shares 3: two 1-share jobs of one user get the
    same MIG instance, served by that instance's own MPS daemon (its limits: one of the
    instance's 3 shares, the jobs' largest), which quits after the last job. The first job's
    first process bypasses MPS (its variables unset) before any MPS client runs: the user's
    server, started up front by the agent, holds the exclusive instance, so that process is
    refused and the MPS clients after it run."""
    wd = cluster.workdir
    with mps_agent(cluster, NODE, ("--isolation", "mig", "--mps-in-mig-shares", "3")):
        jobs = []
        for n in range(2):
            body = (
                "#!/bin/sh\n"
                f"env | grep -E '^(CUDA_|GPUPACK_MEM)' > {wd}/mpsmig-env-$SLURM_JOB_ID.txt\n"
                + ("env -u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_LOG_DIRECTORY "
                   f"{PY} -m slurm_plugin simgpu run --no-report --mem-start 1GiB --iters 1 --iter-ms 1 "
                   f"> {wd}/mpsmig-plain-$SLURM_JOB_ID.txt 2>&1; echo $? > {wd}/mpsmig-plain-rc-$SLURM_JOB_ID.txt\n"
                   if n == 0 else "")
                + f"exec {PY} -m slurm_plugin simgpu run --no-report --mem-start 1GiB --iters 200 --iter-ms 50 "
                f"> {wd}/mpsmig-out-$SLURM_JOB_ID.txt 2>&1\n"
            ).encode()
            jobs.append(cluster.submit(["-J", "e2e-mpsmig", "-w", NODE, "--gres=shard:1"], body))
        envs = {}
        for job in jobs:
            cluster.wait(job, "RUNNING", 60)
            path = wd / f"mpsmig-env-{job}.txt"
            wait_for(lambda: path.exists() and "CUDA_MPS_PIPE_DIRECTORY" in path.read_text(), 30,
                     f"job {job} saved its environment")
            envs[job] = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        devices = {e["CUDA_VISIBLE_DEVICES"] for e in envs.values()}
        pipes = {e["CUDA_MPS_PIPE_DIRECTORY"] for e in envs.values()}
        assert len(devices) == 1 and next(iter(devices)).startswith("MIG-"), envs
        assert len(pipes) == 1 and re.search(rf"/mps/{NODE}/gpu\d-gi\d+/pipe$", next(iter(pipes))), pipes
        assert {e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] for e in envs.values()} == {"33"}
        pipe = cluster.node_path(NODE, Path(next(iter(pipes))))

        def serving_both():
            try:
                doc = json.loads((pipe / "sim-mps.json").read_text())
            except (OSError, ValueError):
                return None
            servers = doc.get("servers", [])
            return doc if len(servers) == 1 and len(servers[0]["clients"]) == 2 else None

        doc = wait_for(serving_both, 60, "the instance's MPS daemon serves both jobs")
        plain = (wd / f"mpsmig-plain-rc-{jobs[0]}.txt").read_text().strip()  # written before its client ran
        said = (wd / f"mpsmig-plain-{jobs[0]}.txt").read_text()
        assert plain == "2" and "busy or unavailable" in said and "held by MPS server" in said, said
        share = int(envs[jobs[0]]["GPUPACK_MEM_LIMIT_BYTES"])
        assert doc["default_pct"] == 33 and doc["default_pinned"] == {"0": share >> 20 << 20}
        log_text = (pipe.parent / "log" / "control.log").read_text()
        assert f"CUDA_VISIBLE_DEVICES={next(iter(devices))}" in log_text
        for job in jobs:
            assert cluster.wait(job, DONE, timeout=90) == "COMPLETED", (wd / f"mpsmig-out-{job}.txt").read_text()
        wait_for(lambda: not (pipe / "nvidia-cuda-mps-control.pid").exists(), 30,
                 "the instance's MPS daemon quits after the last job")
