"""How much the submit shim costs: held-job submission rate with and without it, one run.

The controller is restarted between rounds with `JobSubmitPlugins=lua` and without it. The
rounds come in ABBA order (with, without, without, with, ...) so that drift over the run (a
queue that grows, a neighbour process) falls on both configurations alike. The shim's own
latency comes from the `elapsed_ms=` it logs for every job it handles.

Two rates are reported per configuration: jobs over total time, and one over the median
`sbatch` time (robust to a stall of the machine in one round); the goal is judged on the
first, the second shows how much of a difference is noise.
"""
from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass, field

from slurm_plugin.devcluster.manager import DevCluster, _alive_with, _started_pid

BENCH_NAME = "gpupack-bench"
WARMUP_JOBS = 10  # untimed submissions after each controller restart
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
    with_shim_sbatch_median_ms: float = float("nan")
    without_shim_sbatch_median_ms: float = float("nan")
    ratio_of_medians: float = float("nan")
    pair_ratios: list[float] = field(default_factory=list)  # each ABBA pair's own ratio: the noise


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


def _submit_round(cluster: DevCluster, count: int, per_job: list[float]) -> float:
    env = {**os.environ, **cluster.env()}
    script = b"#!/bin/sh\n# gpupack submit benchmark\ntrue\n"
    started = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        result = subprocess.run(
            ["sbatch", "-H", "--parsable", "-o", "/dev/null", "-J", BENCH_NAME, "--gres=gpu:1"],
            input=script, capture_output=True, env=env,
        )
        per_job.append(time.perf_counter() - t0)
        if result.returncode != 0:
            raise RuntimeError(f"sbatch failed: {result.stderr.decode(errors='replace')}")
    return time.perf_counter() - started


def pair_ratios(round_seconds: list[tuple[bool, float]]) -> list[float]:
    """With-shim rate over without-shim rate for each consecutive pair of rounds (equal job
    counts, so the ratio of rates is the inverse ratio of times)."""
    out = []
    for (a_shim, a_s), (b_shim, b_s) in zip(round_seconds[::2], round_seconds[1::2]):
        if a_shim != b_shim and a_s > 0 and b_s > 0:
            with_s, without_s = (a_s, b_s) if a_shim else (b_s, a_s)
            out.append(round(without_s / with_s, 3))
    return out


def round_order(rounds: int) -> list[bool]:
    """ABBA: with the shim (True) and without, balanced so a linear drift cancels out."""
    order: list[bool] = []
    for r in range(rounds):
        order += [True, False] if r % 2 == 0 else [False, True]
    return order


class BenchError(RuntimeError):
    """The benchmark cannot run as asked; the message says what to change."""


def _config_values(cluster: DevCluster, *keys: str) -> dict[str, str]:
    out = cluster._slurm("scontrol", "show", "config").stdout
    found = {}
    for key in keys:
        match = re.search(rf"^{key}\s*=\s*(\S+)", out, flags=re.M)
        if match:
            found[key] = match.group(1)
    return found


def check_job_table_room(cluster: DevCluster, needed: int) -> None:
    """Refuse to start a run that would hit MaxJobCount half-way (finished and cancelled
    jobs stay in the controller's table for MinJobAge seconds)."""
    config = _config_values(cluster, "MaxJobCount", "MinJobAge")
    limit = config.get("MaxJobCount", "")
    if not limit.isdigit():
        return
    held = len(cluster._slurm("squeue", "-h", "-t", "all", "-o", "%i").stdout.split())
    if held + needed > int(limit):
        raise BenchError(
            f"the controller holds {held} job records and this run submits {needed} more, over "
            f"MaxJobCount={limit}; finished and cancelled jobs leave its table after MinJobAge "
            f"({config.get('MinJobAge', '?')} s): wait that long, or use fewer --jobs"
        )


def run_submit_bench(cluster: DevCluster, jobs: int = 500, rounds: int = 4) -> SubmitBench:
    log_path = cluster.spec.log / "slurmctld.log"
    per_round = max(1, jobs // rounds)
    check_job_table_room(cluster, 2 * rounds * (per_round + WARMUP_JOBS))
    controller = _Controller(cluster)
    time_in = {True: 0.0, False: 0.0}
    per_job: dict[bool, list[float]] = {True: [], False: []}
    latencies: list[float] = []
    round_seconds: list[tuple[bool, float]] = []
    try:
        for with_shim in round_order(rounds):
            controller.restart(with_shim=with_shim)
            # a restarted controller answers its first submissions late (state recovery,
            # nodes registering again): warm it up, untimed, before the round
            _submit_round(cluster, WARMUP_JOBS, [])
            offset = log_path.stat().st_size
            seconds = _submit_round(cluster, per_round, per_job[with_shim])
            time_in[with_shim] += seconds
            round_seconds.append((with_shim, seconds))
            if with_shim:
                with open(log_path, "rb") as fh:
                    fh.seek(offset)
                    latencies += [float(m) for m in _ELAPSED_RE.findall(fh.read().decode(errors="replace"))]
    finally:
        controller.restore()
        # the benchmark's own held jobs; nothing else is touched
        cluster._slurm("scancel", "--name", BENCH_NAME, "--state", "PENDING")
    total = per_round * rounds
    version = cluster._slurm("scontrol", "--version").stdout.strip()
    with_rate, without_rate = total / time_in[True], total / time_in[False]
    med_with, med_without = statistics.median(per_job[True]), statistics.median(per_job[False])
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
        with_shim_sbatch_median_ms=round(med_with * 1000, 3),
        without_shim_sbatch_median_ms=round(med_without * 1000, 3),
        ratio_of_medians=round(med_without / med_with, 3),
        pair_ratios=pair_ratios(round_seconds),
    )


def as_dict(result: SubmitBench) -> dict:
    return asdict(result)
