"""`gpupack bench scale`: what the suite costs a real slurmctld at a site's size.

One command, its own cluster (a claimed block of ports, a fresh folder): the dev cluster's
three nodes, running one job per GPU, plus N nodes of 8 GPUs defined ``State=FUTURE``
(:mod:`~slurm_plugin.bench.scale_cluster`), and M pending GPU jobs submitted through the shim.
Then two windows of the same length on the same queue: without the suite (JobSubmitPlugins
unset, the helper and web view stopped) and with it. In each, `sdiag` (reset first) gives
slurmctld's RPCs by type, and a user's `sbatch`, `squeue` and `scontrol show job` are timed
every few seconds (:mod:`~slurm_plugin.bench.scale_window`). With the suite, the helper's
memory, its watcher's rounds and its queries' time, and the store's size.

`slurmctld_share_pct` is slurmctld's RPC time with the suite less without, over the window.
"""
from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from slurm_plugin.bench import scale_figures as fig
from slurm_plugin.bench.own_cluster import own_cluster
from slurm_plugin.bench.scale_cluster import (Suite, fill_queue, scale_spec, shares_per_gpu, start_running_jobs,
                                              store_bytes, user_env)
from slurm_plugin.bench.scale_window import Window, run_window, wait_for_rounds, watcher_url
from slurm_plugin.bench.submit import BenchError
from slurm_plugin.devcluster.spec import ClusterSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScalePlan:
    nodes: int = 2000  # FUTURE nodes beside the dev cluster's real ones
    gpus_per_node: int = 8
    jobs: int = 50000  # pending jobs queued through the shim
    window_s: float = 600.0
    probe_s: float = 2.0  # a user's sbatch, scontrol show job and squeue, this often
    workers: int = 8  # sbatch at a time while the queue fills
    fill_max_s: float = 0.0  # > 0: no submission started after this long (the queue is what got in)
    lua_alone: bool = False  # a third window: job_submit/lua on with a script that does nothing

    def check(self) -> None:
        if (self.window_s < 10 or self.probe_s <= 0 or self.nodes < 0 or self.jobs < 0 or self.workers < 1
                or self.fill_max_s < 0):
            raise BenchError(f"a window of at least 10 s, a positive probe interval, nodes, jobs and "
                             f"workers not below 0 (1 for workers): got {self}")


@dataclass
class ScaleResult:
    nodes: int  # every node slurmctld holds: the FUTURE ones and the real ones
    gpus: int
    queued_jobs: int
    running_jobs: int
    window_s: float
    slurmctld_share_pct: float
    squeue_latency_ratio: float
    sbatch_latency_ratio: float
    scontrol_latency_ratio: float
    watcher_round_s: float  # median of its last-round gauge, sampled through the window
    watcher_round_max_s: float
    watcher_cycle_s: float  # a round and its pause: how often the rules see the cluster
    watcher_query_s: float  # of a round, the time in Slurm commands (median)
    watcher_rounds: int
    submit_p50_ms: float
    submit_p99_ms: float
    helper_rss_mib: float
    submit_rss_mib: float
    watcher_rss_mib: float
    store_bytes: int
    fill_s: float
    fill_rate_per_s: float
    fill_submit_p50_ms: float
    fill_submit_p99_ms: float
    slurm_version: str
    load_avg_1m: list[float] = field(default_factory=list)  # at the start of each window
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    rpcs: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # with ``lua_alone``: Slurm's Lua plugin by itself (a script that does nothing) against
    # without any plugin, and the suite against that
    lua_alone_sbatch_ratio: float | None = None
    lua_alone_share_pct: float | None = None
    sbatch_over_lua_alone_ratio: float | None = None
    share_over_lua_alone_pct: float | None = None


def _ms(values: list[float]) -> dict[str, float]:
    return {"p50": round(fig.median(values) * 1000, 2), "p99": round(fig.percentile(values, 0.99) * 1000, 2),
            "n": len(values)}


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _rounded(x: float, digits: int = 3) -> float:
    return round(x, digits) if math.isfinite(x) else x


def lua_alone_figures(without: Window, alone: Window, with_suite: Window) -> dict[str, float]:
    """What job_submit/lua costs by itself (``alone``: its window with a script that does
    nothing), and what the suite adds to that."""
    window_s = (without.seconds + alone.seconds + with_suite.seconds) / 3
    without_s, alone_s, with_s = (fig.median(w.sbatch_s) for w in (without, alone, with_suite))
    return {
        "lua_alone_sbatch_ratio": _rounded(fig.ratio(alone_s, without_s)),
        "lua_alone_share_pct": _rounded(fig.share_pct(alone.rpcs, without.rpcs, window_s)),
        "sbatch_over_lua_alone_ratio": _rounded(fig.ratio(with_s, alone_s)),
        "share_over_lua_alone_pct": _rounded(fig.share_pct(with_suite.rpcs, alone.rpcs, window_s)),
    }


def summarise(plan: ScalePlan, without: Window, with_suite: Window, fill_ms: list[float], fill, running: int,
              store_size: int, version: str, loads: list[float]) -> ScaleResult:
    """The bench's figures from its two windows (pure but for nothing: every input is measured)."""
    window_s = (without.seconds + with_suite.seconds) / 2
    start, end = with_suite.watcher_start, with_suite.watcher_end
    rounds = end.get("rounds", math.nan) - start.get("rounds", math.nan)
    sampled = {k: [s[k] for s in with_suite.watcher_samples if k in s] for k in ("round_s", "cycle_s", "query_s")}
    if sampled["round_s"]:
        round_s = fig.median(sampled["round_s"])
    else:  # no round-time gauge: the mean cycle (a round and its pause)
        round_s = with_suite.seconds / rounds if rounds and rounds > 0 else math.nan
    query_s = fig.median(sampled["query_s"])
    notes = []
    if not sampled["round_s"]:
        notes.append("watcher_round_s is the window over its rounds (round and pause): the watcher serves no round time")
    if without.shim_ms:
        notes.append(f"the shim logged {len(without.shim_ms)} lines in the window without it")
    submit_rss = max(with_suite.submit_rss_mib, default=math.nan)
    watcher_rss = max(with_suite.watcher_rss_mib, default=math.nan)
    return ScaleResult(
        nodes=plan.nodes + ClusterSpec().nodes, gpus=plan.nodes * plan.gpus_per_node + ClusterSpec().nodes * ClusterSpec().gpus_per_node,
        queued_jobs=fill.jobs, running_jobs=running, window_s=round(window_s, 1),
        slurmctld_share_pct=_rounded(fig.share_pct(with_suite.rpcs, without.rpcs, window_s)),
        squeue_latency_ratio=_rounded(fig.ratio(fig.median(with_suite.squeue_s), fig.median(without.squeue_s))),
        sbatch_latency_ratio=_rounded(fig.ratio(fig.median(with_suite.sbatch_s), fig.median(without.sbatch_s))),
        scontrol_latency_ratio=_rounded(fig.ratio(fig.median(with_suite.scontrol_s), fig.median(without.scontrol_s))),
        watcher_round_s=_rounded(round_s), watcher_round_max_s=_rounded(max(sampled["round_s"], default=math.nan)),
        watcher_cycle_s=_rounded(fig.median(sampled["cycle_s"])), watcher_query_s=_rounded(query_s),
        watcher_rounds=int(rounds) if math.isfinite(rounds) else -1,
        submit_p50_ms=_rounded(fig.median(with_suite.shim_ms)), submit_p99_ms=_rounded(fig.percentile(with_suite.shim_ms, 0.99)),
        helper_rss_mib=_rounded(submit_rss + watcher_rss, 1), submit_rss_mib=_rounded(submit_rss, 1),
        watcher_rss_mib=_rounded(watcher_rss, 1), store_bytes=store_size,
        fill_s=round(fill.seconds, 1), fill_rate_per_s=round(fill.rate_per_s, 1),
        fill_submit_p50_ms=_rounded(fig.median(fill_ms)), fill_submit_p99_ms=_rounded(fig.percentile(fill_ms, 0.99)),
        slurm_version=version, load_avg_1m=loads,
        latency_ms={f"{what}_{side}": _ms(getattr(w, f"{what}_s")) for what in ("sbatch", "squeue", "scontrol")
                    for side, w in (("with", with_suite), ("without", without))},
        rpcs=fig.rpc_rows(with_suite.rpcs, without.rpcs, window_s), notes=notes,
    )


def run_scale_bench(plan: ScalePlan, keep: bool = False) -> ScaleResult:
    plan.check()
    spec = scale_spec(plan.nodes, plan.gpus_per_node, plan.jobs, shares_per_gpu(ClusterSpec().gpu_model))
    with own_cluster(spec, keep=keep) as cluster:
        env = user_env(cluster)
        version = cluster._slurm("scontrol", "--version").stdout.strip()
        running = start_running_jobs(cluster, env)
        log.info("%d jobs running on the real nodes; queueing %d through the shim", running, plan.jobs)
        log_path = cluster.spec.log / "slurmctld.log"
        offset = log_path.stat().st_size
        fill = fill_queue(env, plan.jobs, plan.workers, max_s=plan.fill_max_s)
        if fill.not_started:
            log.warning("the fill's %.0f s were up: %d jobs queued, %d not submitted", plan.fill_max_s, fill.jobs,
                        fill.not_started)
        if fill.failed:
            log.warning("%d submissions failed (first: %s)", fill.failed, fill.first_error)
        from slurm_plugin.bench.submit import shim_parts

        with open(log_path, "rb") as fh:
            fh.seek(offset)
            fill_ms = [e for e, _a in shim_parts(fh.read().decode(errors="replace"))]
        log.info("queued %d jobs in %.0f s; window without the suite", fill.jobs, fill.seconds)
        suite = Suite(cluster)
        loads = []
        try:
            suite.off()
            time.sleep(5)  # the last rounds' RPCs and the reconfigure done before the reset
            loads.append(_load())
            without = run_window(cluster, None, env, plan.window_s, plan.probe_s)
            alone = None
            if plan.lua_alone:
                log.info("window with job_submit/lua alone (a script that does nothing)")
                suite.plugin_alone()
                time.sleep(5)
                loads.append(_load())
                alone = run_window(cluster, None, env, plan.window_s, plan.probe_s)
            suite.on()
            ready = wait_for_rounds(watcher_url(cluster), 2, timeout_s=max(600.0, plan.window_s))
            log.info("window with the suite")
            loads.append(_load())
            with_suite = run_window(cluster, suite, env, plan.window_s, plan.probe_s)
        finally:
            suite.restore()
        result = summarise(plan, without, with_suite, fill_ms, fill, running, store_bytes(cluster.spec.database),
                           version, loads)
        if alone is not None:
            for key, value in lua_alone_figures(without, alone, with_suite).items():
                setattr(result, key, value)
            result.latency_ms.update({f"{what}_lua_alone": _ms(getattr(alone, f"{what}_s"))
                                      for what in ("sbatch", "squeue", "scontrol")})
        if fill.not_started:
            result.notes.append(f"the fill stopped after {plan.fill_max_s:.0f} s: {fill.jobs} of {plan.jobs} jobs queued")
        if ready < 2:
            result.notes.append(f"the restarted watcher had made {ready:.0f} rounds when the window began")
        return result


# -- what it writes ----------------------------------------------------------------------
HEADLINE = ("nodes", "gpus", "queued_jobs", "running_jobs", "window_s", "slurmctld_share_pct", "squeue_latency_ratio",
            "sbatch_latency_ratio", "scontrol_latency_ratio", "watcher_round_s", "watcher_round_max_s", "watcher_cycle_s", "watcher_query_s", "watcher_rounds",
            "submit_p50_ms", "submit_p99_ms", "helper_rss_mib", "submit_rss_mib", "watcher_rss_mib", "store_bytes",
            "fill_s", "fill_rate_per_s", "fill_submit_p50_ms", "fill_submit_p99_ms", "slurm_version", "load_avg_1m")


LUA_ALONE = ("lua_alone_sbatch_ratio", "lua_alone_share_pct", "sbatch_over_lua_alone_ratio", "share_over_lua_alone_pct")


def table(result: dict) -> str:
    """The figures, a user's latencies and the RPCs by type, as Markdown."""
    lines = ["| figure | value |", "|---|---|"] + [f"| {k} | {result[k]} |" for k in HEADLINE]
    lines += [f"| {k} | {result[k]} |" for k in LUA_ALONE if result.get(k) is not None]
    lines += ["", "| a user's command | p50 ms | p99 ms | runs |", "|---|---|---|---|"]
    for key, v in result["latency_ms"].items():
        lines.append(f"| {key} | {v['p50']} | {v['p99']} | {v['n']} |")
    lines += ["", "| RPC | count with | count without | total ms with | total ms without | mean ms with | mean ms without |",
              "|---|---|---|---|---|---|---|"]
    for r in result["rpcs"]:
        lines.append(f"| {r['rpc']} | {r['count_with']} | {r['count_without']} | {r['total_ms_with']} | "
                     f"{r['total_ms_without']} | {r['mean_ms_with']} | {r['mean_ms_without']} |")
    lines += [f"- {n}" for n in result["notes"]]
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> bool:
    """slurmctld's time per RPC type with and without the suite, and a user's latencies; False
    when matplotlib (the `plots` extra) is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [r for r in result["rpcs"] if r["total_ms_with"] or r["total_ms_without"]][:12]
    fig_, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    names = [r["rpc"].replace("REQUEST_", "") for r in rows]
    y = range(len(rows))
    left.barh([i + 0.2 for i in y], [r["total_ms_with"] / 1000 for r in rows], 0.4, label="with the suite")
    left.barh([i - 0.2 for i in y], [r["total_ms_without"] / 1000 for r in rows], 0.4, label="without")
    left.set_yticks(list(y), names, fontsize=7)
    left.invert_yaxis()
    left.set_xlabel(f"slurmctld seconds in the {result['window_s']:.0f} s window")
    left.set_title(f"RPC time by type: share {result['slurmctld_share_pct']} %")
    left.legend()
    kinds = ("sbatch", "squeue", "scontrol")
    x = range(len(kinds))
    lat = result["latency_ms"]
    right.bar([i - 0.2 for i in x], [lat[f"{k}_without"]["p50"] for k in kinds], 0.4, label="without")
    right.bar([i + 0.2 for i in x], [lat[f"{k}_with"]["p50"] for k in kinds], 0.4, label="with the suite")
    right.set_xticks(list(x), [f"{k}" for k in kinds])
    right.set_ylabel("a user's median latency (ms)")
    right.set_title(f"{result['nodes']} nodes, {result['queued_jobs']} queued jobs, Slurm {result['slurm_version']}")
    right.legend()
    fig_.tight_layout()
    fig_.savefig(path, dpi=110)
    plt.close(fig_)
    return True


def write_outputs(result: dict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "scale.json", out / "scale.md"]
    written[0].write_text(json.dumps(result, indent=1) + "\n")
    written[1].write_text(table(result))
    if plot(result, out / "scale.png"):
        written.append(out / "scale.png")
    return written
