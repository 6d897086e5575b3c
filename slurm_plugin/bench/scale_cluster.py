"""The scale bench's cluster: a site-sized slurm.conf for the bench's own cluster, the suite
switched on and off on it, the queue filled through the shim, and the suite's processes read.

Nodes beyond the dev cluster's real ones are defined ``State=FUTURE``: slurmctld keeps them in
its tables and its partition without a slurmd (no ping, no registration), on 22.05, 24.11 and
26.05 alike, and pending jobs stay pending (reason Resources or Priority: the scheduler and
backfill consider them every pass) as the real nodes' GPUs are taken by running jobs. CLOUD
nodes would be handed jobs and powered up, and DOWN nodes are pinged: neither keeps a queue
as it is for ten minutes.
"""
from __future__ import annotations

import logging
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from slurm_plugin.bench.submit import BenchError, _Switch
from slurm_plugin.devcluster.manager import DevCluster
from slurm_plugin.devcluster.processes import terminate
from slurm_plugin.devcluster.spec import ClusterSpec

log = logging.getLogger(__name__)

QUEUED_NAME = "gpupack-scale"  # the queued jobs' names: QUEUED_NAME-<k>, a few workloads
PROBE_NAME = "gpupack-scale-probe"
RUNNING_NAME = "gpupack-scale-running"
WORKLOADS = 50  # distinct job names among the queued jobs (fingerprints the rules look up)
SUITE_ROLES = ("helper", "web")  # what `without the suite` stops (the agents answer only the helper)
#: Slurm's own scheduler periods (a site's defaults), not the dev cluster's 2 s: with a queue of
#: 50,000 jobs a backfill pass every 2 s would be the whole of slurmctld's day, with or without;
#: and `defer` (no scheduling try per submission), as Slurm's high-throughput guide advises
SITE_SCHEDULER = "SchedulerParameters=bf_interval=30,sched_interval=60,defer"
SCRIPT = b"#!/bin/sh\n# gpupack scale bench\nsleep 600\n"


def scale_spec(far_nodes: int, gpus_per_far_node: int, jobs: int, shares_per_gpu: int) -> ClusterSpec:
    """The dev cluster's three nodes and ``far_nodes`` FUTURE nodes of ``gpus_per_far_node``
    GPUs, room for ``jobs`` queued jobs and the probes."""
    gpu = ClusterSpec().gres_type
    far = (f"NodeName=far[1-{far_nodes}] State=FUTURE CPUs=64 RealMemory=512000 "
           f"Gres=gpu:{gpu}:{gpus_per_far_node},shard:{gpu}:{shares_per_gpu * gpus_per_far_node}")
    extra = [f"MaxJobCount={max(10000, jobs + 20000)}", SITE_SCHEDULER]
    return replace(ClusterSpec(), extra_slurm_conf=tuple(extra + ([far] if far_nodes else [])))


def shares_per_gpu(model: str) -> int:
    from mig.share_ladder import model_ladder

    return model_ladder(model).shares_per_gpu


#: job_submit/lua with nothing to do: what Slurm's Lua plugin costs a submission by itself. On
#: every submission after any job changed, the plugin rebuilds the `slurm.jobs` table (one Lua
#: table per job slurmctld holds) before it calls the script, whatever the script does
INERT_LUA = ("-- gpupack bench scale: the plugin's own cost (this script does nothing)\n"
             "function slurm_job_submit(job_desc, part_list, submit_uid) return slurm.SUCCESS end\n"
             "function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) return slurm.SUCCESS end\n")


class Suite:
    """Switches the suite on a running bench cluster: the shim (JobSubmitPlugins) and the helper
    (submit side and watcher) with the web view."""

    def __init__(self, cluster: DevCluster):
        self.cluster = cluster
        self.switch = _Switch(cluster)
        self.script = cluster.spec.etc / "job_submit.lua"
        self.shim = self.script.read_text()

    def plugin_alone(self) -> None:
        """job_submit/lua on with a script that does nothing (the suite's processes stay as
        they are: stopped, after ``off``)."""
        self.script.write_text(INERT_LUA)
        self.switch.set(with_shim=True)

    def restore(self) -> None:
        """The shim's own script and JobSubmitPlugins as the cluster had them."""
        if self.script.read_text() != self.shim:
            self.script.write_text(self.shim)
        self.switch.restore()

    def off(self) -> None:
        self.switch.set(with_shim=False)
        registry = self.cluster.registry
        kept = []
        for p in registry.load():
            if p.role in SUITE_ROLES:
                pid = p.live_pid()
                if pid is not None:
                    terminate(pid, p.marker, timeout=30)
            else:
                kept.append(p)
        registry.save(kept)

    def on(self) -> None:
        if self.script.read_text() != self.shim:
            self.script.write_text(self.shim)
        self.switch.set(with_shim=True)
        running = self.cluster.registry.running()
        procs = list(running.values())
        self.cluster._start_gpupack(running, procs)

    def helper_pids(self) -> dict[str, int]:
        """{"submit": pid, "watcher": pid} of the running helper (those found)."""
        found = {}
        for p in self.cluster.registry.load():
            if p.role == "helper" and (pid := p.live_pid()) is not None:
                found["submit"] = pid
                children = Path(f"/proc/{pid}/task/{pid}/children")
                kids = children.read_text().split() if children.exists() else []
                if kids:
                    found["watcher"] = int(kids[0])
        return found


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def sbatch(env: dict[str, str], args: list[str], script: bytes = SCRIPT) -> tuple[float, int | None, str]:
    """(seconds, job id or None, error) of one `sbatch --parsable -o /dev/null ARGS`."""
    t0 = time.perf_counter()
    done = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", *args], input=script, capture_output=True, env=env)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        return took, None, done.stderr.decode(errors="replace").strip()
    return took, int(done.stdout.decode().strip().split(";")[0]), ""


@dataclass
class Fill:
    jobs: int
    seconds: float
    failed: int
    first_error: str = ""
    not_started: int = 0  # left out when the fill's time was up

    @property
    def rate_per_s(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0


def start_running_jobs(cluster: DevCluster, env: dict[str, str], timeout_s: float = 120) -> int:
    """One job per GPU of the real nodes, running (so the queue behind them stays pending);
    returns how many run."""
    gpus = cluster.spec.nodes * cluster.spec.gpus_per_node
    for _ in range(gpus):
        _took, job, err = sbatch(env, ["--gres=gpu:1", "-J", RUNNING_NAME, "-t", "600"], b"#!/bin/sh\nsleep 36000\n")
        if job is None:
            raise BenchError(f"sbatch of a running job failed: {err}")
    deadline = time.time() + timeout_s
    running = 0
    while time.time() < deadline:
        out = cluster._slurm("squeue", "-h", "-n", RUNNING_NAME, "-t", "RUNNING", "-o", "%i").stdout.split()
        running = len(out)
        if running >= gpus:
            break
        time.sleep(1)
    return running


def fill_queue(env: dict[str, str], jobs: int, workers: int = 4, progress_every: int = 5000,
               max_s: float = 0.0) -> Fill:
    """Submit ``jobs`` pending GPU jobs (not held, no begin time) through the shim, ``workers``
    sbatch at a time; with ``max_s`` > 0, none is started after that many seconds (the queue is
    then what was submitted by then: `Fill.jobs`, and `Fill.not_started` says how many were left)."""
    failed = 0
    not_started = 0
    first_error = ""
    started = time.perf_counter()

    def one(i: int) -> str | None:
        if max_s > 0 and time.perf_counter() - started >= max_s:
            return None
        _took, job, err = sbatch(env, ["--gres=gpu:1", "-J", f"{QUEUED_NAME}-{i % WORKLOADS}", "-t", "60"])
        return "" if job is not None else err or "sbatch failed"

    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        for i, err in enumerate(pool.map(one, range(jobs)), start=1):
            if err is None:
                not_started += 1
            elif err:
                failed += 1
                first_error = first_error or err
            if i % progress_every == 0:
                log.info("queued %d of %d jobs (%.0f/s)", i, jobs, i / (time.perf_counter() - started))
    finally:  # interrupted: the submissions not yet started are dropped, not waited for
        pool.shutdown(wait=True, cancel_futures=True)
    return Fill(jobs - failed - not_started, time.perf_counter() - started, failed, first_error, not_started)


def store_bytes(database: Path) -> int:
    """The store's size on disk: the database and its write-ahead log."""
    return sum(p.stat().st_size for p in (database, Path(f"{database}-wal")) if p.exists())


def user_env(cluster: DevCluster) -> dict[str, str]:
    return {**os.environ, **cluster.env()}
