"""`compare`: several policies on one workload; a Markdown report with PNG plots."""
from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from simulator.config import BASELINES, SimConfig
from simulator.engine import simulate
from simulator.metrics import summary
from simulator.parallel import Cell, CellResult, run_cells

log = logging.getLogger(__name__)

COLUMNS = (
    ("label", "policy"), ("predictor", "pred"), ("jobs", "jobs"),
    ("makespan_s", "makespan h"), ("avg_jct_s", "avg JCT h"), ("p95_jct_s", "p95 JCT h"),
    ("avg_queue_s", "avg queue h"), ("p95_queue_s", "p95 queue h"), ("gpu_util", "GPU util"),
    ("gpu_mem_util", "GPU mem"), ("jobs_preempted", "preempted"), ("oom_restarts", "OOM"),
    ("predictive_restarts", "early restarts"), ("mig_reconfigurations", "MIG reconf"),
    ("p95_slowdown", "p95 slowdown"), ("pair_bound_ok", "within pairs"),
    ("multi_gpu_avg_queue_s", "multi-GPU queue h"), ("grow_preemptions", "grow evictions"),
    ("regroup_moves", "regroup moves"), ("regroup_lost_work_s", "lost to moves h"),
    ("pair_bound_worst", "worst / pair bound"),
    ("sim_wall_s", "sim s"),
)


def _cell(key: str, v) -> str:
    if key.endswith("_s") and key != "sim_wall_s":
        return f"{v / 3600:.2f}"
    if key in ("gpu_util", "gpu_mem_util"):
        return f"{v:.1%}"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:.3f}" if key != "sim_wall_s" else f"{v:.1f}"
    return str(v)


def markdown_table(results: list[dict]) -> str:
    head = "| " + " | ".join(c[1] for c in COLUMNS) + " |"
    sep = "|" + "|".join("---" for _ in COLUMNS) + "|"
    rows = ["| " + " | ".join(_cell(k, r[k]) for k, _ in COLUMNS) + " |" for r in results]
    return "\n".join([head, sep, *rows])


def _label(r: dict) -> str:
    return r.get("label") or r["policy"] + ("+pred" if r["predictor"] == "on" else "")


def verdict(results: list[dict]) -> list[str]:
    """The suite's best policy (lowest avg JCT) against every baseline, in words."""
    suite = [r for r in results if r["policy"] not in BASELINES]
    base = [r for r in results if r["policy"] in BASELINES]
    if not suite or not base:
        return ["(need at least one suite policy and one baseline to compare)"]
    best = min(suite, key=lambda r: (r["avg_jct_s"], r["makespan_s"]))
    out = [f"Best suite policy by average JCT: **{_label(best)}** "
           f"(avg JCT {best['avg_jct_s'] / 3600:.2f} h, makespan {best['makespan_s'] / 3600:.1f} h, "
           f"within measured pair speeds: {'yes' if best['pair_bound_ok'] else 'NO'})."]
    for b in base:
        dj = (b["avg_jct_s"] - best["avg_jct_s"]) / b["avg_jct_s"] if b["avg_jct_s"] else 0.0
        dm = (b["makespan_s"] - best["makespan_s"]) / b["makespan_s"] if b["makespan_s"] else 0.0
        beats = best["avg_jct_s"] < b["avg_jct_s"] and best["makespan_s"] < b["makespan_s"]
        out.append(f"- vs {_label(b)}: avg JCT {dj:+.1%} better, makespan {dm:+.1%} better "
                   f"-> {'beats it on both' if beats else 'does NOT beat it on both'}")
    return out


def _plots(runs: list[tuple[dict, object]], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    files = []
    fig, ax = plt.subplots(figsize=(8, 5))
    for summ, res in runs:
        jct = np.sort(np.array([j.end - j.submit for j in res.jobs if j.end is not None]) / 3600)
        if len(jct):
            ax.plot(jct, np.arange(1, len(jct) + 1) / len(jct), label=_label(summ))
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT distribution (CDF)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "jct_cdf.png", dpi=110)
    plt.close(fig)
    files.append("jct_cdf.png")

    fig, axes = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    for summ, res in runs:
        tl = res.timeline
        if not tl:
            continue
        t = np.array([p[0] for p in tl]) / 86400
        n = res.config.gpus
        step = max(1, len(tl) // 1500)
        util = np.array([p[2] for p in tl]) / n
        alloc = np.array([p[1] for p in tl]) / n
        k = max(1, int(86400 / res.config.timeline_step_s / 4))  # ~6 h moving average
        kern = np.ones(k) / k
        axes[0].plot(t[::step], np.convolve(util, kern, "same")[::step], label=_label(summ), lw=1)
        axes[1].plot(t[::step], np.convolve(alloc, kern, "same")[::step], label=_label(summ), lw=1)
    axes[0].set_ylabel("GPU compute util")
    axes[1].set_ylabel("GPUs allocated")
    axes[1].set_xlabel("days since first submission (6 h moving average)")
    axes[0].set_title("Utilisation over time")
    for a in axes:
        a.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "util_over_time.png", dpi=110)
    plt.close(fig)
    files.append("util_over_time.png")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    labels = [_label(s) for s, _ in runs]
    x = np.arange(len(runs))
    ax.bar(x - 0.2, [s["avg_jct_s"] / 3600 for s, _ in runs], 0.4, label="avg JCT (h)")
    ax.bar(x + 0.2, [s["avg_queue_s"] / 3600 for s, _ in runs], 0.4, label="avg queueing (h)")
    ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    ax.set_title("Average JCT and queueing delay")
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "jct_bars.png", dpi=110)
    plt.close(fig)
    files.append("jct_bars.png")
    return files


def compare(configs: list[SimConfig], specs, profiles, pairs, out_dir: str | Path,
            workload: dict | None = None, plots: bool = True,
            progress: Callable[[str], None] | None = None, workers: int = 1) -> dict:
    """Run each config; write ``report.md``, ``results.json`` and the plots into ``out_dir``.
    ``workers``: processes the configs run in (:func:`~simulator.parallel.run_cells`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    def done(_i: int, r: CellResult) -> None:
        summ = r.summary
        if progress:
            progress(f"{_label(summ)}: avg JCT {summ['avg_jct_s'] / 3600:.2f} h, makespan "
                     f"{summ['makespan_s'] / 3600:.1f} h ({summ['sim_wall_s']:.1f} s)")

    cells = [Cell(cfg) for cfg in configs]
    runs = [(r.summary, r.result) for r in run_cells(cells, {0: (specs, profiles, pairs)}, workers,
                                                      keep_results=True, done=done)]
    results = [s for s, _ in runs]
    warnings: list[str] = []
    files: list[str] = []
    if plots:
        try:
            files = _plots(runs, out)
        except ImportError:
            warnings.append("matplotlib is not installed: no plots (pip install matplotlib)")
    table = markdown_table(results)
    lines = ["# Simulated policies on one workload", ""]
    if workload:
        lines += ["Workload: " + ", ".join(f"{k}={v}" for k, v in workload.items()), ""]
    lines += [table, "", "Times in hours. `within pairs`: no shared job ran slower than its "
              "worst measured pair allows; `worst / pair bound`: the largest ratio of a shared "
              "job's slowdown (first start to end, over its duration alone) to that bound "
              "(<= 1.000 when it holds; restarted jobs and unmeasured pairs not judged).", "",
              "## Best suite policy against the baselines", ""]
    lines += verdict(results)
    lines += [""]
    for f in files:
        lines += [f"![{f}]({f})", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    (out / "results.json").write_text(json.dumps({"workload": workload, "results": results},
                                                 indent=1, allow_nan=False))
    return {"results": results, "table": table, "report": str(report), "warnings": warnings,
            "plots": files}


def _slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log(y) on log(x): run time ~ x ** slope."""
    import math

    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else None


def scaling(configs: list[SimConfig], specs, profiles, pairs, job_counts: list[int],
            gpu_counts: list[int], out_dir: str | Path,
            progress: Callable[[str], None] | None = None) -> dict:
    """Simulator run time against the number of jobs (first N of the workload, at each
    config's GPUs) and against the number of GPUs (whole workload); ``scaling.md`` and
    ``scaling.json`` in ``out_dir``, and a "Run time" section appended to its ``report.md``
    when there is one."""
    from dataclasses import replace

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    for cfg in configs:
        label = cfg.label
        # untimed warm-up: module imports (statsmodels, which the predictor loads at its first
        # warning, takes about 2 s) and caches belong to no point of the curve
        if cfg.predictor:
            import importlib

            importlib.import_module("statsmodels.regression.linear_model")
        simulate(cfg, specs[: min(len(specs), 2000)], profiles, pairs)
        points = [(n, cfg.gpus) for n in job_counts] + [(len(specs), g) for g in gpu_counts]
        for n, g in dict.fromkeys(points):
            res = simulate(replace(cfg, gpus=g), specs[:n], profiles, pairs)
            s = summary(res)
            rows.append({"policy": label, "jobs": n, "gpus": g, "sim_wall_s": round(res.wall_s, 2),
                         "events": res.events, "passes": res.passes,
                         "passes_skipped": res.passes_skipped, "avg_queue_s": s["avg_queue_s"],
                         "gpu_alloc": s["gpu_alloc"]})
            if progress:
                progress(f"{label}: {n} jobs on {g} GPUs: {res.wall_s:.1f} s "
                         f"(avg queue {s['avg_queue_s'] / 3600:.1f} h)")
    lines = ["## Run time against jobs and GPUs", "",
             "Simulator wall time of one policy run (loading the trace excluded, one core). "
             "`passes`: scheduling passes run; `skipped`: passes skipped because nothing "
             "changed since one that started nothing.", "",
             "| policy | jobs | GPUs | sim s | events | passes | skipped | avg queue h | GPUs allocated |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['policy']} | {r['jobs']} | {r['gpus']} | {r['sim_wall_s']:.1f} | "
                     f"{r['events']} | {r['passes']} | {r['passes_skipped']} | "
                     f"{r['avg_queue_s'] / 3600:.1f} | {r['gpu_alloc']:.1%} |")
    lines.append("")
    for cfg in configs:
        label = cfg.label
        mine = [r for r in rows if r["policy"] == label]
        by_jobs = [r for r in mine if r["gpus"] == cfg.gpus]
        by_gpus = [r for r in mine if r["jobs"] == len(specs)]
        sj = _slope([r["jobs"] for r in by_jobs], [r["sim_wall_s"] for r in by_jobs])
        sg = _slope([r["gpus"] for r in by_gpus], [r["sim_wall_s"] for r in by_gpus])
        worst = max(mine, key=lambda r: r["sim_wall_s"])
        parts = [f"- {label}:"]
        if sj is not None:
            parts.append(f"run time ~ jobs^{sj:.2f} at {cfg.gpus} GPUs;")
        if sg is not None:
            parts.append(f"~ GPUs^{sg:.2f} on the whole workload (fewer GPUs: longer queues, "
                         f"more work per pass);")
        parts.append(f"slowest point {worst['sim_wall_s']:.1f} s ({worst['jobs']} jobs, "
                     f"{worst['gpus']} GPUs).")
        lines.append(" ".join(parts))
    text = "\n".join(lines) + "\n"
    (out / "scaling.md").write_text(text)
    (out / "scaling.json").write_text(json.dumps(rows, indent=1, allow_nan=False))
    report = out / "report.md"
    if report.exists():
        body = report.read_text()
        cut = body.find("## Run time against jobs and GPUs")
        if cut >= 0:
            body = body[:cut].rstrip() + "\n"
        report.write_text(body.rstrip() + "\n\n" + text)
    return {"rows": rows, "markdown": text}
