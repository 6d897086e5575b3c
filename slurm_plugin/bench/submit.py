"""How much the submit shim costs: held-job submission rate with and without it, one run.

The controller is restarted between rounds with `JobSubmitPlugins=lua` and without it, the
rounds alternate (with, without, with, without) so drift hits both, and the shim's own
latency comes from the `elapsed_ms=` it logs for every job it handles.
"""
from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass

from slurm_plugin.devcluster.manager import DevCluster, _alive_with, _started_pid

BENCH_NAME = "gpupack-bench"
_ELAPSED_RE = re.compile(r"lua: gpupack: .* elapsed_ms=([0-9.]+)")


@dataclass
class SubmitBench:
    jobs: int
    with_shim_rate_per_s: float
    without_shim_rate_per_s: float
    ratio: float
    shim_p50_ms: float
    shim_p99_ms: float
    shim_max_ms: float
    shim_samples: int
    rounds: int
    slurm_version: str


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


class _Controller:
    """Restart slurmctld with or without the shim, keeping the dev cluster's registry true."""

    def __init__(self, cluster: DevCluster):
        self.cluster = cluster
        self.conf = cluster.spec.slurm_conf
        self.original = self.conf.read_text()

    def restart(self, with_shim: bool) -> None:
        text = self.original if with_shim else self.original.replace("JobSubmitPlugins=lua\n", "")
        self.conf.write_text(text)
        procs = self.cluster._load()
        ctld = next(p for p in procs if p.role == "slurmctld")
        os.kill(ctld.pid, signal.SIGTERM)
        while _alive_with(ctld.pid, ctld.marker):
            time.sleep(0.05)
        pidfile = self.cluster.spec.run / "slurmctld.pid"
        pidfile.unlink(missing_ok=True)
        subprocess.run(["/usr/sbin/slurmctld", "-f", str(self.conf)], check=True, capture_output=True)
        ctld.pid = _started_pid(pidfile, ctld.marker, "slurmctld", self.cluster.spec.log)
        self.cluster._save(procs)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.cluster._slurm("scontrol", "ping").returncode == 0:
                return
            time.sleep(0.2)

    def restore(self) -> None:
        if self.conf.read_text() != self.original:
            self.restart(with_shim=True)


def _submit_round(cluster: DevCluster, count: int) -> float:
    env = {**os.environ, **cluster.env()}
    script = b"#!/bin/sh\n# gpupack submit benchmark\ntrue\n"
    started = time.perf_counter()
    for _ in range(count):
        result = subprocess.run(
            ["sbatch", "-H", "--parsable", "-o", "/dev/null", "-J", BENCH_NAME, "--gres=gpu:1"],
            input=script, capture_output=True, env=env,
        )
        if result.returncode != 0:
            raise RuntimeError(f"sbatch failed: {result.stderr.decode(errors='replace')}")
    return time.perf_counter() - started


def run_submit_bench(cluster: DevCluster, jobs: int = 500, rounds: int = 2) -> SubmitBench:
    log_path = cluster.spec.log / "slurmctld.log"
    controller = _Controller(cluster)
    per_round = max(1, jobs // rounds)
    with_time = without_time = 0.0
    latencies: list[float] = []
    try:
        for _ in range(rounds):
            controller.restart(with_shim=True)
            offset = log_path.stat().st_size
            with_time += _submit_round(cluster, per_round)
            with open(log_path, "rb") as fh:
                fh.seek(offset)
                latencies += [float(m) for m in _ELAPSED_RE.findall(fh.read().decode(errors="replace"))]
            controller.restart(with_shim=False)
            without_time += _submit_round(cluster, per_round)
    finally:
        controller.restore()
        # the benchmark's own held jobs; nothing else is touched
        cluster._slurm("scancel", "--name", BENCH_NAME, "--state", "PENDING")
    total = per_round * rounds
    version = cluster._slurm("scontrol", "--version").stdout.strip()
    with_rate, without_rate = total / with_time, total / without_time
    return SubmitBench(
        jobs=total,
        with_shim_rate_per_s=round(with_rate, 2),
        without_shim_rate_per_s=round(without_rate, 2),
        ratio=round(with_rate / without_rate, 3),
        shim_p50_ms=round(statistics.median(latencies), 3) if latencies else float("nan"),
        shim_p99_ms=round(_percentile(latencies, 0.99), 3) if latencies else float("nan"),
        shim_max_ms=round(max(latencies), 3) if latencies else float("nan"),
        shim_samples=len(latencies),
        rounds=rounds,
        slurm_version=version,
    )


def as_dict(result: SubmitBench) -> dict:
    return asdict(result)
