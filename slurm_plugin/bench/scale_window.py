"""One window of the scale bench: slurmctld's RPCs over it (`sdiag`, reset first), a user's
`sbatch`, `squeue` and `scontrol show job` timed every few seconds, and (with the suite) the
helper's memory, its watcher's rounds and its Slurm queries' time, sampled from its metrics."""
from __future__ import annotations

import logging
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field

from slurm_plugin.bench.scale_cluster import PROBE_NAME, Suite, rss_mib, sbatch
from slurm_plugin.bench.scale_figures import Sdiag, parse_sdiag, prometheus_value, rpc_delta
from slurm_plugin.bench.submit import BenchError, shim_parts
from slurm_plugin.devcluster.manager import DevCluster
from slurm_plugin.metrics.settings import MetricsOverride

log = logging.getLogger(__name__)

SAMPLE_S = 5.0  # the helper's memory and metrics, this often
#: the watcher's figures, by the names its metrics give them: the rounds counter, and gauges of
#: its last round (its own time, with its pause, and in Slurm commands); a name the watcher
#: does not serve is left out
WATCHER_SERIES = {
    "rounds": "gpupack_monitor_rounds_total",
    "round_s": "gpupack_watcher_round_seconds",
    "cycle_s": "gpupack_watcher_cycle_seconds",
    "query_s": "gpupack_watcher_slurm_query_seconds",
}


@dataclass
class Window:
    suite: bool
    seconds: float
    rpcs: Sdiag
    sbatch_s: list[float] = field(default_factory=list)
    squeue_s: list[float] = field(default_factory=list)
    scontrol_s: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)  # probe -> failed runs
    shim_ms: list[float] = field(default_factory=list)  # the shim's elapsed_ms of the probes' sbatch
    shim_ask_ms: list[float] = field(default_factory=list)
    submit_rss_mib: list[float] = field(default_factory=list)
    watcher_rss_mib: list[float] = field(default_factory=list)
    watcher_start: dict[str, float] = field(default_factory=dict)
    watcher_end: dict[str, float] = field(default_factory=dict)
    watcher_samples: list[dict[str, float]] = field(default_factory=list)  # its gauges, every SAMPLE_S


def sdiag(cluster: DevCluster, reset: bool = False) -> str:
    if reset:
        done = cluster._slurm("sdiag", "--reset")
        if done.returncode != 0:
            raise BenchError(f"sdiag --reset failed: {done.stderr.strip()}")
    done = cluster._slurm("sdiag", timeout=60)
    if done.returncode != 0:
        raise BenchError(f"sdiag failed: {done.stderr.strip()}")
    return done.stdout


def watcher_url(cluster: DevCluster) -> str:
    spec = cluster.spec
    return MetricsOverride().watch(spec.gpupack_toml, spec.slurm_conf).url


def watcher_figures(url: str) -> dict[str, float]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
    except OSError as exc:
        log.info("the watcher's metrics did not answer: %s", exc)
        return {}
    out = {}
    for key, name in WATCHER_SERIES.items():
        value = prometheus_value(text, name)
        if value is not None:
            out[key] = value
    return out


def wait_for_rounds(url: str, rounds: int, timeout_s: float) -> float:
    """Wait until the watcher has made ``rounds`` rounds, at most ``timeout_s``; returns the
    count seen (a slow watcher is a finding of the window, not a reason to drop it)."""
    deadline = time.time() + timeout_s
    seen = 0.0
    while time.time() < deadline:
        seen = watcher_figures(url).get("rounds", 0.0)
        if seen >= rounds:
            break
        time.sleep(1)
    return seen


def _timed(env: dict[str, str], argv: list[str]) -> tuple[float, bool]:
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env)
    return time.perf_counter() - t0, done.returncode == 0


def run_window(cluster: DevCluster, suite: Suite | None, env: dict[str, str], window_s: float,
               probe_s: float) -> Window:
    """Measure ``window_s`` seconds; ``suite`` None: without the suite."""
    log_path = cluster.spec.log / "slurmctld.log"
    offset = log_path.stat().st_size
    url = watcher_url(cluster)
    before = parse_sdiag(sdiag(cluster, reset=True))
    out = Window(suite=suite is not None, seconds=0.0, rpcs=Sdiag())
    if suite is not None:
        out.watcher_start = watcher_figures(url)
    started = time.monotonic()
    next_sample = started
    while time.monotonic() - started < window_s:
        tick = time.monotonic()
        took, job, _err = sbatch(env, ["--gres=gpu:1", "-J", PROBE_NAME, "-t", "60"])
        if job is None:
            out.failures["sbatch"] = out.failures.get("sbatch", 0) + 1
        else:
            out.sbatch_s.append(took)
            took, ok = _timed(env, ["scontrol", "show", "job", str(job)])
            (out.scontrol_s.append(took) if ok else out.failures.__setitem__("scontrol", out.failures.get("scontrol", 0) + 1))
        took, ok = _timed(env, ["squeue"])
        (out.squeue_s.append(took) if ok else out.failures.__setitem__("squeue", out.failures.get("squeue", 0) + 1))
        if suite is not None and time.monotonic() >= next_sample:
            pids = suite.helper_pids()
            for role, series in (("submit", out.submit_rss_mib), ("watcher", out.watcher_rss_mib)):
                if role in pids and (mib := rss_mib(pids[role])) is not None:
                    series.append(mib)
            out.watcher_samples.append(watcher_figures(url))
            next_sample += SAMPLE_S
        time.sleep(max(0.0, probe_s - (time.monotonic() - tick)))
    out.seconds = time.monotonic() - started
    out.rpcs = rpc_delta(before, parse_sdiag(sdiag(cluster)))
    if suite is not None:
        out.watcher_end = watcher_figures(url)
    with open(log_path, "rb") as fh:
        fh.seek(offset)
        for elapsed, ask in shim_parts(fh.read().decode(errors="replace")):
            out.shim_ms.append(elapsed)
            if ask is not None:
                out.shim_ask_ms.append(ask)
    cluster._slurm("scancel", "--name", PROBE_NAME, timeout=60)  # the probes only: the next window's queue is this one's
    return out
