"""Policies at several loads and seeds, with confidence intervals.

A load is a GPU count. :func:`gpus_for_load` turns an offered load per GPU into one (below
1 the queue drains, above 1 it grows); :func:`gpus_for_alloc` finds the GPU count at which
``exclusive`` keeps a target share of the GPUs allocated (bisection; allocation falls as
GPUs are added). Each seed draws the profiles (and growing jobs) anew over the same
arrivals. For every (load, policy) the mean over seeds, a 95 % Student interval and the
range (min, max) are given for each of :data:`METRICS` (average and p95 JCT, queueing,
per-job slowdown p50/p95, jobs failed and restarted, work lost, ...); for each load, the
ratio of the best baseline's average JCT to the best suite policy's, per seed, with its
interval; with matplotlib, ``sweep_jct.png`` plots JCT against cluster size per policy.
"""
from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from simulator.config import BASELINES, SimConfig
from simulator.engine import simulate
from simulator.metrics import summary
from simulator.parallel import Cell, CellResult, run_cells

METRICS = ("avg_jct_s", "p95_jct_s", "avg_queue_s", "p50_slowdown", "p95_slowdown",
           "jobs_failed", "jobs_restarted", "lost_gpu_h", "jobs_unfinished", "gpu_util",
           "pred_mae", "pred_unseen_mae", "sim_wall_s")

def interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """(mean, half-width of the Student interval); half-width 0 for fewer than 2 values."""
    from predictor.linfit import t_quantile

    if not values:
        return 0.0, 0.0
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, 0.0
    half = t_quantile(0.5 + level / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(
        len(values))
    return m, half


def label(cfg: SimConfig) -> str:
    return cfg.label


def offered_gpus(specs) -> float:
    """GPUs the trace asks for on average over its submission window (GPU-seconds / span)."""
    if not specs:
        return 0.0
    span = max(s.submit for s in specs) - min(s.submit for s in specs)
    return sum(s.duration * s.gpus for s in specs) / span if span > 0 else 0.0


def gpus_for_load(load: float, specs) -> int:
    """The GPU count at which the trace offers ``load`` (GPU-seconds asked per second of its
    submission window, per GPU): 0.5 a cluster twice what the trace asks for, 2 half of it."""
    if not load > 0 or not math.isfinite(load):
        raise ValueError(f"an offered load is a positive number (1 = the GPUs the trace asks "
                         f"for), not {load!r}")
    return max(1, math.ceil(offered_gpus(specs) / load))


def gpus_for_alloc(target: float, specs, profiles, pairs, gpu_model: str,
                   tol: int = 5,
                   progress: Callable[[str], None] | None = None) -> tuple[int, float]:
    """The GPU count at which ``exclusive`` has ``target`` (0-1) of its GPUs allocated over
    the run, and the allocation it gets there. Searched between 0.8 and 4 times the GPUs
    the trace offers on average (fewer would queue for months)."""
    if not 0 < target < 1:
        raise ValueError("a target allocation is a share in (0, 1), e.g. 0.85")
    demand = offered_gpus(specs)
    lo, hi = int(0.8 * demand), int(4 * demand) + 1

    def alloc(n: int) -> float:
        s = summary(simulate(SimConfig(policy="exclusive", gpus=n, gpu_model=gpu_model),
                             specs, profiles, pairs))
        if progress:
            progress(f"exclusive on {n} GPUs: {s['gpu_alloc']:.1%} allocated")
        return s["gpu_alloc"]

    max_gpus = max((s.gpus for s in specs), default=1)
    lo = max(lo, max_gpus)
    best = (lo, alloc(lo))
    if best[1] <= target:
        return best
    a_hi = alloc(hi)
    if a_hi >= target:
        return hi, a_hi
    while hi - lo > tol:
        mid = (lo + hi) // 2
        a = alloc(mid)
        if a >= target:
            lo, best = mid, (mid, a)
        else:
            hi, a_hi = mid, a
    # the closer of the two ends
    return best if abs(best[1] - target) <= abs(a_hi - target) else (hi, a_hi)


def sweep(configs: list[SimConfig], workloads: dict[int, tuple], gpu_counts: list[int],
          out_dir: str | Path, loads: dict[int, str] | None = None,
          progress: Callable[[str], None] | None = None, about: dict | None = None,
          plots: bool = True, workers: int = 1) -> dict:
    """Run every config at every GPU count on every seed's workload.

    ``workloads``: seed -> (specs, profiles, pairs). ``loads``: GPU count -> how it was
    chosen (e.g. "exclusive 85 % allocated"). ``about``: what the report names (trace,
    truth table, the trace load's skips). Writes ``sweep.md``, ``sweep.json`` and, with
    ``plots`` and matplotlib, ``sweep_jct.png``. ``workers``: processes the cells run in
    (:func:`~simulator.parallel.run_cells`; the same figures in any case, ``progress`` told
    of each cell as it ends)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cells = [Cell(replace(cfg, gpus=g), seed) for g in gpu_counts for seed in workloads for cfg in configs]

    def done(i: int, r: CellResult) -> None:
        if progress:
            s = r.summary
            progress(f"{s['gpus']} GPUs, seed {cells[i].workload}, {label(cells[i].config)}: avg JCT "
                     f"{s['avg_jct_s'] / 3600:.2f} h ({s['sim_wall_s']:.1f} s)")

    runs: list[dict] = []
    for i, r in enumerate(run_cells(cells, workloads, workers, done=done)):
        runs.append(r.summary | {"seed": cells[i].workload, "label": label(cells[i].config)})
    labels = [label(c) for c in configs]
    table = aggregate(runs, labels, gpu_counts)
    warnings: list[str] = []
    files: list[str] = []
    if plots:
        try:
            from simulator.sweep_plot import plot_jct

            files = [plot_jct(table, labels, out / "sweep_jct.png")]
        except ImportError:
            warnings.append("matplotlib is not installed: no plot (pip install "
                            "'slurm-gpu-packer[plots]')")
    text = markdown(table, loads or {}, sorted(workloads), about or {}, labels, files)
    (out / "sweep.md").write_text(text)
    (out / "sweep.json").write_text(json.dumps({"about": about or {}, "runs": runs,
                                                "table": table}, indent=1, allow_nan=False))
    return {"runs": runs, "table": table, "markdown": text, "warnings": warnings,
            "plots": files}


def aggregate(runs: list[dict], labels: list[str], gpu_counts: list[int]) -> list[dict]:
    rows = []
    for g in gpu_counts:
        here = [r for r in runs if r["gpus"] == g]
        for lab in labels:
            mine = [r for r in here if r["label"] == lab]
            row = {"gpus": g, "policy": lab, "seeds": len(mine),
                   "baseline": mine[0]["policy"] in BASELINES if mine else False}
            for k in METRICS:
                vals = [r[k] for r in mine if r.get(k) is not None]
                if vals:
                    row[k], row[k + "_ci"] = interval(vals)
                    row[k + "_min"], row[k + "_max"] = min(vals), max(vals)
            rows.append(row)
        # best suite policy against the best baseline, seed by seed
        seeds = sorted({r["seed"] for r in here})
        ratios = []
        for sd in seeds:
            rs = [r for r in here if r["seed"] == sd]
            base = [r["avg_jct_s"] for r in rs if r["policy"] in BASELINES]
            suite = [r["avg_jct_s"] for r in rs if r["policy"] not in BASELINES]
            if base and suite and min(suite) > 0:
                ratios.append(min(base) / min(suite))
        if ratios:
            m, h = interval(ratios)
            rows.append({"gpus": g, "policy": "ratio best baseline / best suite",
                         "seeds": len(ratios), "ratio": m, "ratio_ci": h})
    return rows


COLUMNS = (  # (metric, header, scale, format)
    ("avg_jct_s", "avg JCT h", 3600, "{:.2f}"), ("p95_jct_s", "p95 JCT h", 3600, "{:.2f}"),
    ("avg_queue_s", "avg queue h", 3600, "{:.2f}"),
    ("p50_slowdown", "slowdown p50", 1, "{:.3f}"), ("p95_slowdown", "slowdown p95", 1, "{:.3f}"),
    ("jobs_failed", "failed", 1, "{:.0f}"), ("jobs_restarted", "restarted", 1, "{:.0f}"),
    ("lost_gpu_h", "lost GPU-h", 1, "{:.0f}"), ("gpu_util", "GPU util %", 0.01, "{:.1f}"),
    ("pred_mae", "pred MAE", 1, "{:.3f}"), ("sim_wall_s", "sim s", 1, "{:.1f}"),
)


def _cell(r: dict, k: str, scale: float, fmt: str) -> str:
    if k not in r:
        return "-"
    return fmt.format(r[k] / scale) + " ± " + fmt.format(r[k + "_ci"] / scale)


def markdown(rows: list[dict], loads: dict[int, str], seeds: list[int], about: dict | None = None,
             labels: list[str] | None = None, plots: list[str] | None = None) -> str:
    about = about or {}
    lines = ["## Policies at several loads", ""]
    if about:
        tl = about.get("trace_load") or {}
        lines += [f"Trace {about.get('trace', '?')}; truth (pair speeds the replay slows jobs "
                  f"by): {about.get('truth', '?')}; GPU {about.get('gpu_model', '?')}."]
        if tl:
            why = ", ".join(f"{n} {r}" for r, n in (tl.get("skipped") or {}).items())
            lines += [f"Trace load: {tl.get('jobs', 0)} jobs kept of {tl.get('rows', 0)} rows "
                      f"(the first {about.get('jobs_replayed', '?')} replayed); skipped "
                      f"{tl.get('skipped_total', 0)}{f' ({why})' if why else ''}; never started "
                      f"in the trace {tl.get('never_ran', 0)}; shares of one GPU "
                      f"{tl.get('shares', 0)}; timestamps {tl.get('timestamps', '?')}."]
        lines.append("")
    lines += [f"Mean over seeds {', '.join(map(str, seeds))} ± the half-width of a 95 % "
              "Student interval (sweep.json also has each metric's min and max over seeds). "
              "Times in hours; slowdown: a job's first start to end over its duration alone; "
              "failed: jobs with an attempt that ran out of memory or failed beside a pair that "
              "cannot run together; restarted: jobs restarted for any reason; lost: work lost "
              "to restarts, GPU-hours; pred MAE: mean absolute error of the speeds colocate "
              "predicted for its packs.", ""]
    labels = labels or list(dict.fromkeys(r["policy"] for r in rows if "ratio" not in r))
    sizes = sorted({r["gpus"] for r in rows})
    lines += ["### Average JCT (h) by cluster size", "",
              "| GPUs | load | " + " | ".join(labels) + " |", "|---|---|" + "---|" * len(labels)]
    for g in sizes:
        cells = [_cell(next((r for r in rows if r["gpus"] == g and r["policy"] == lab), {}),
                       "avg_jct_s", 3600, "{:.2f}") for lab in labels]
        lines.append(f"| {g} | {loads.get(g, '')} | " + " | ".join(cells) + " |")
    lines.append("")
    for f in plots or []:
        lines += [f"![{f}]({f})", ""]
    for g in sizes:
        why = f" ({loads[g]})" if g in loads else ""
        lines += [f"### {g} GPUs{why}", "",
                  "| policy | " + " | ".join(c[1] for c in COLUMNS) + " |",
                  "|---|" + "---|" * len(COLUMNS)]
        for r in rows:
            if r["gpus"] != g or "ratio" in r:
                continue
            name = r["policy"] + (" (baseline)" if r["baseline"] else "")
            lines.append(f"| {name} | " + " | ".join(_cell(r, *c[:1], *c[2:]) for c in COLUMNS)
                         + " |")
        for r in rows:
            if r["gpus"] == g and "ratio" in r:
                lines += ["", f"Best baseline's average JCT over the best suite policy's: "
                              f"**{r['ratio']:.3f} ± {r['ratio_ci']:.3f}** ({r['seeds']} seeds)."]
        lines.append("")
    return "\n".join(lines) + "\n"
