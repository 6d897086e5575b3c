"""How much the submit shim costs: held-job submission rate with and without it, one run.

The run alternates short blocks of submissions with `JobSubmitPlugins=lua` and with it
unset, switching with `scontrol reconfigure` (22.05 loads and unloads job_submit plugins
on reconfigure; about 25 ms, where a controller restart took seconds). Blocks come in ABBA
order, so a drift falls on both configurations alike, and short blocks mean a slow minute
of the machine does too. Each switch is checked: a block without the shim must leave no
shim line in slurmctld's log, a block with it must leave one per job.

Reported: the rate ratio over all jobs (the goal is judged on it), the ratio of median
`sbatch` times, and the ratio of each ABBA pair of blocks with a 95 % interval over the
pairs, which says how much of the figure is noise. The shim's own latency comes from the
`elapsed_ms=` it logs for every job it handles; of it, `ask_ms=` is the exchange with the
helper (socket and decision) and the rest the shim's own Lua work (`lua_*`).
"""
from __future__ import annotations

import math
import os
import re
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurm_plugin.devcluster.manager import DevCluster

BENCH_NAME = "gpupack-bench"
BLOCK_JOBS = 25  # timed submissions per block
WARMUP_JOBS = 3  # untimed submissions after each switch (the shim connects afresh)
_ELAPSED_RE = re.compile(r"lua: gpupack: .* elapsed_ms=([0-9.]+)")
_ASK_RE = re.compile(r"lua: gpupack: .* ask_ms=([0-9.]+).* elapsed_ms=([0-9.]+)")
_PLUGIN_LINE = "JobSubmitPlugins=lua\n"


@dataclass
class SubmitBench:
    jobs: int  # timed submissions in each configuration
    with_shim_rate_per_s: float
    without_shim_rate_per_s: float
    ratio: float
    shim_p50_ms: float
    shim_p99_ms: float
    shim_max_ms: float
    shim_samples: int
    blocks: int  # blocks in each configuration
    slurm_version: str
    with_shim_sbatch_median_ms: float = float("nan")
    without_shim_sbatch_median_ms: float = float("nan")
    ratio_of_medians: float = float("nan")
    pair_ratio_mean: float = float("nan")
    pair_ratio_ci95: list[float] = field(default_factory=list)  # 95 % t-interval of the mean over pairs
    pair_ratios: list[float] = field(default_factory=list)  # each ABBA pair of blocks' own ratio
    ask_p50_ms: float = float("nan")  # the shim's exchange with the helper (its decision and the socket)
    ask_p99_ms: float = float("nan")
    lua_p50_ms: float = float("nan")  # the shim's own work: elapsed_ms less ask_ms
    lua_p99_ms: float = float("nan")


class BenchError(RuntimeError):
    """The benchmark cannot run as asked; the message says what to change."""


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def block_order(blocks: int) -> list[bool]:
    """ABBA: with the shim (True) and without, balanced so a linear drift cancels out."""
    order: list[bool] = []
    for r in range(blocks):
        order += [True, False] if r % 2 == 0 else [False, True]
    return order


def pair_ratios(block_seconds: list[tuple[bool, float]]) -> list[float]:
    """With-shim rate over without-shim rate for each consecutive pair of blocks (equal job
    counts, so the ratio of rates is the inverse ratio of times)."""
    out = []
    for (a_shim, a_s), (b_shim, b_s) in zip(block_seconds[::2], block_seconds[1::2]):
        if a_shim != b_shim and a_s > 0 and b_s > 0:
            with_s, without_s = (a_s, b_s) if a_shim else (b_s, a_s)
            out.append(round(without_s / with_s, 3))
    return out


def mean_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean of `values` and its two-sided t-interval (nan bounds with fewer than 2 values)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    from predictor.linfit import t_quantile

    half = t_quantile(0.5 + level / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


class _Switch:
    """Turns the shim on and off: JobSubmitPlugins in slurm.conf, then `scontrol reconfigure`."""

    def __init__(self, cluster: DevCluster):
        self.cluster = cluster
        self.conf = cluster.spec.slurm_conf
        self.original = self.conf.read_text()
        if _PLUGIN_LINE not in self.original:
            raise BenchError(f"{self.conf} has no `JobSubmitPlugins=lua` line: is this a gpupack dev cluster?")

    def set(self, with_shim: bool) -> None:
        self.conf.write_text(self.original if with_shim else self.original.replace(_PLUGIN_LINE, ""))
        done = self.cluster._slurm("scontrol", "reconfigure")
        if done.returncode != 0:
            raise BenchError(f"scontrol reconfigure failed: {done.stderr.strip()}")
        self._wait_controller()

    def _wait_controller(self, timeout_s: float = 60.0) -> None:
        """Until the cluster's slurmctld answers again: from 23.11 `scontrol reconfigure` makes
        it start a new process of itself, and a teardown right after one found neither the old
        pid alive nor the new one in its pid file, and left the new slurmctld and the running
        jobs behind."""
        from slurm_plugin.bench.own_cluster import controller_answers

        if not controller_answers(self.cluster, timeout_s):
            raise BenchError(f"slurmctld did not answer within {timeout_s:.0f} s of `scontrol reconfigure`; "
                             f"logs: {self.cluster.spec.log}")

    def restore(self) -> None:
        if self.conf.read_text() != self.original:
            self.set(with_shim=True)


def _submit_block(env: dict[str, str], count: int, per_job: list[float]) -> float:
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
            raise BenchError(f"sbatch failed: {result.stderr.decode(errors='replace')}")
    return time.perf_counter() - started


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


class _LogTail:
    """The shim's latencies logged since the last look."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = path.stat().st_size

    def skip(self) -> None:
        self.offset = self.path.stat().st_size

    def parts(self) -> list[tuple[float, float | None]]:
        """(elapsed_ms, ask_ms) per shim line since the last look (ask_ms None: a shim that
        does not log it)."""
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            text = fh.read().decode(errors="replace")
            self.offset = fh.tell()
        return shim_parts(text)


def shim_parts(text: str) -> list[tuple[float, float | None]]:
    """(elapsed_ms, ask_ms) of each shim line in slurmctld's log ``text``."""
    out: list[tuple[float, float | None]] = []
    for line in text.splitlines():
        elapsed = _ELAPSED_RE.search(line)
        if elapsed is None:
            continue
        ask = _ASK_RE.search(line)
        out.append((float(elapsed.group(1)), float(ask.group(1)) if ask else None))
    return out


def run_submit_bench(cluster: DevCluster, jobs: int = 500, block: int = BLOCK_JOBS) -> SubmitBench:
    blocks = max(1, jobs // block)
    check_job_table_room(cluster, 2 * blocks * (block + WARMUP_JOBS))
    env = {**os.environ, **cluster.env()}
    switch = _Switch(cluster)
    log = _LogTail(cluster.spec.log / "slurmctld.log")
    per_job: dict[bool, list[float]] = {True: [], False: []}
    latencies: list[tuple[float, float | None]] = []
    block_seconds: list[tuple[bool, float]] = []
    try:
        for with_shim in block_order(blocks):
            switch.set(with_shim)
            _submit_block(env, WARMUP_JOBS, [])
            log.skip()
            block_seconds.append((with_shim, _submit_block(env, block, per_job[with_shim])))
            seen = log.parts()
            if with_shim and len(seen) < block:
                raise BenchError(f"the shim logged {len(seen)} of {block} jobs: did reconfigure load it?")
            if not with_shim and seen:
                raise BenchError("the shim still ran with JobSubmitPlugins unset: reconfigure did not unload it")
            latencies += seen
    finally:
        switch.restore()
        # the benchmark's own held jobs; nothing else is touched
        cluster._slurm("scancel", "--name", BENCH_NAME, "--state", "PENDING")
    time_in = {flag: sum(s for f, s in block_seconds if f == flag) for flag in (True, False)}
    total = blocks * block
    with_rate, without_rate = total / time_in[True], total / time_in[False]
    med_with, med_without = statistics.median(per_job[True]), statistics.median(per_job[False])
    pairs = pair_ratios(block_seconds)
    mean, low, high = mean_interval(pairs)
    asks = [a for _e, a in latencies if a is not None]
    lua = [e - a for e, a in latencies if a is not None]
    elapsed = [e for e, _a in latencies]
    return SubmitBench(
        jobs=total,
        with_shim_rate_per_s=round(with_rate, 2),
        without_shim_rate_per_s=round(without_rate, 2),
        ratio=round(with_rate / without_rate, 3),
        shim_p50_ms=round(statistics.median(elapsed), 3),
        shim_p99_ms=round(_percentile(elapsed, 0.99), 3),
        shim_max_ms=round(max(elapsed), 3),
        shim_samples=len(latencies),
        blocks=blocks,
        slurm_version=cluster._slurm("scontrol", "--version").stdout.strip(),
        with_shim_sbatch_median_ms=round(med_with * 1000, 3),
        without_shim_sbatch_median_ms=round(med_without * 1000, 3),
        ratio_of_medians=round(med_without / med_with, 3),
        pair_ratio_mean=round(mean, 3),
        pair_ratio_ci95=[round(low, 3), round(high, 3)],
        pair_ratios=pairs,
        ask_p50_ms=round(statistics.median(asks), 3) if asks else math.nan,
        ask_p99_ms=round(_percentile(asks, 0.99), 3) if asks else math.nan,
        lua_p50_ms=round(statistics.median(lua), 3) if lua else math.nan,
        lua_p99_ms=round(_percentile(lua, 0.99), 3) if lua else math.nan,
    )


def as_dict(result: SubmitBench) -> dict:
    return asdict(result)
