"""Policies at several loads and seeds, with confidence intervals.

A load is a GPU count. :func:`gpus_for_alloc` finds the GPU count at which ``exclusive``
keeps a target share of the GPUs allocated (bisection; allocation falls as GPUs are added).
Each seed draws the profiles (and growing jobs) anew over the same arrivals. For every
(load, policy) the mean over seeds and a 95 % Student interval are given for average JCT,
queueing delay and work lost to restarts; for each load, the ratio of the best baseline's
average JCT to the best suite policy's, per seed, with its interval.
"""
from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from slurm_plugin.simulator.config import BASELINES, SimConfig
from slurm_plugin.simulator.engine import simulate
from slurm_plugin.simulator.metrics import summary

METRICS = ("avg_jct_s", "avg_queue_s", "p95_jct_s", "lost_gpu_h", "gpu_util", "pred_mae",
           "pred_unseen_mae", "sim_wall_s")


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
          progress: Callable[[str], None] | None = None) -> dict:
    """Run every config at every GPU count on every seed's workload.

    ``workloads``: seed -> (specs, profiles, pairs). ``loads``: GPU count -> how it was
    chosen (e.g. "exclusive 85 % allocated"). Writes ``sweep.md`` and ``sweep.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs: list[dict] = []
    for g in gpu_counts:
        for seed, (specs, profiles, pairs) in workloads.items():
            for cfg in configs:
                s = summary(simulate(replace(cfg, gpus=g), specs, profiles, pairs))
                s |= {"seed": seed, "label": label(cfg)}
                runs.append(s)
                if progress:
                    progress(f"{g} GPUs, seed {seed}, {s['label']}: avg JCT "
                             f"{s['avg_jct_s'] / 3600:.2f} h ({s['sim_wall_s']:.1f} s)")
    table = aggregate(runs, [label(c) for c in configs], gpu_counts)
    text = markdown(table, loads or {}, sorted(workloads))
    (out / "sweep.md").write_text(text)
    (out / "sweep.json").write_text(json.dumps({"runs": runs, "table": table}, indent=1))
    return {"runs": runs, "table": table, "markdown": text}


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


def markdown(rows: list[dict], loads: dict[int, str], seeds: list[int]) -> str:
    lines = ["## Policies at several loads", "",
             f"Mean over seeds {', '.join(map(str, seeds))} with the half-width of a 95 % "
             "Student interval. Times in hours; lost: work lost to restarts (out-of-memory, "
             "early restarts, contention requeues), GPU-hours; pred MAE: mean absolute error "
             "of the speeds colocate predicted for its packs (unseen: packs of pairs it had "
             "not yet run).", ""]
    for g in sorted({r["gpus"] for r in rows}):
        why = f" ({loads[g]})" if g in loads else ""
        lines += [f"### {g} GPUs{why}", "",
                  "| policy | avg JCT h | avg queue h | p95 JCT h | lost GPU-h | GPU util | "
                  "pred MAE | unseen MAE | sim s |", "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            if r["gpus"] != g or "ratio" in r:
                continue

            def cell(k, scale=1.0, fmt="{:.2f}"):
                if k not in r:
                    return "-"
                return (fmt.format(r[k] / scale) + " ± " + fmt.format(r[k + "_ci"] / scale))

            lines.append(f"| {r['policy']}{'' if not r['baseline'] else ' (baseline)'} | "
                         f"{cell('avg_jct_s', 3600)} | {cell('avg_queue_s', 3600)} | "
                         f"{cell('p95_jct_s', 3600)} | {cell('lost_gpu_h', 1, '{:.0f}')} | "
                         f"{cell('gpu_util', 0.01, '{:.1f}')} % | {cell('pred_mae', 1, '{:.3f}')} | "
                         f"{cell('pred_unseen_mae', 1, '{:.3f}')} | "
                         f"{cell('sim_wall_s', 1, '{:.1f}')} |")
        for r in rows:
            if r["gpus"] == g and "ratio" in r:
                lines += ["", f"Best baseline's average JCT over the best suite policy's: "
                              f"**{r['ratio']:.3f} ± {r['ratio_ci']:.3f}** ({r['seeds']} seeds)."]
        lines.append("")
    return "\n".join(lines) + "\n"
