"""What the watcher's job listing costs per round, with finished jobs piling up in the controller.

Finished jobs stay in slurmctld for `MinJobAge` (thousands on a busy site). The watcher
needs only the jobs in play (pending, running, …) plus the few it follows; where
`squeue --json` honours filters (23.11+) that is all it asks for, and on 22.05 it must read
every record. This submits N held jobs of its own and cancels them (finished records, as
many as a busy site keeps, without running N jobs on this machine), then times both
listings and the formatted one the watcher reads since (issue 36), interleaved, and reports
their medians. No other job is touched.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import time
from dataclasses import dataclass

from slurm_plugin.devcluster.manager import DevCluster
from slurm_plugin.slurm.model import FINISHED_JOB_STATES
from slurm_plugin.slurm.runner import SlurmRunner

NAME = "gpupack-bench-listing"


@dataclass
class ListingBench:
    slurm_version: str
    jobs_in_controller: int
    in_play: int
    rounds: int
    in_play_median_ms: float  # the JSON of the jobs in play (what the watcher read each round before issue 36)
    everything_median_ms: float  # the whole listing (22.05's only JSON choice)
    formatted_median_ms: float  # the jobs in play as formatted text (the watcher's per-round read since)


def _fill(cluster: DevCluster, count: int) -> None:
    env = {**os.environ, **cluster.env()}
    for _ in range(count):
        subprocess.run(["sbatch", "-Q", "-H", "-J", NAME, "-o", "/dev/null", "--wrap", "true"],
                       env=env, check=True, capture_output=True)
    subprocess.run(["scancel", "--name", NAME, "--state", "PENDING"], env=env, check=True, capture_output=True)


def _timed(call) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def run_listing_bench(cluster: DevCluster, *, finished: int, rounds: int, timeout_s: float = 900) -> ListingBench:
    """Add `finished` finished jobs, then time both listings `rounds` times each."""
    runner = SlurmRunner(slurm_conf=str(cluster.spec.slurm_conf), timeout=60)
    _fill(cluster, finished)
    deadline = time.time() + timeout_s
    while time.time() < deadline and any(
        j.name == NAME and j.base_state not in FINISHED_JOB_STATES for j in runner.jobs_in_play()
    ):
        time.sleep(2)
    total, in_play = len(runner.jobs()), len(runner.jobs_in_play())
    watched: list[float] = []
    everything: list[float] = []
    formatted: list[float] = []
    for i in range(rounds):  # interleaved, so a slow moment of the machine falls on each
        kinds = [(watched, runner.jobs_in_play), (everything, runner.jobs), (formatted, runner.formatted_jobs)]
        for times, call in (kinds if i % 2 == 0 else kinds[::-1]):
            times.append(_timed(call))
    return ListingBench(str(runner.version()), total, in_play, rounds,
                        round(statistics.median(watched), 2), round(statistics.median(everything), 2),
                        round(statistics.median(formatted), 2))
