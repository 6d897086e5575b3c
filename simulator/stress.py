"""Stress tables: pair speeds unlike the measured ones, to replay with ``--truth``.

The measured pairs (Lucid's) are kind: most pairs keep over 90 % of their speed. A site
whose jobs contend harder should know whether a policy still wins when they do.
:func:`stress_pairs` draws a table for every ordered pair of the workload profiles:

- per unordered pair (and per workload beside itself), a draw decides its kind:
  with probability ``zero_frac`` it **cannot run together** (speed 0 both ways); with
  probability ``tail_frac`` it is in the **tail** (each way drawn uniformly in
  ``[0.01, tail_max]``); otherwise it is in the **body**;
- a body pair's two speeds are drawn independently from a Beta distribution with mean
  ``mean`` and standard deviation ``spread``.

Same arguments, same seed, same table. ``gpupack simulate stress-pairs`` writes it in the
ordered-pairs layout (``workload,beside,speed``, :mod:`simulator.truth`).
"""
from __future__ import annotations

import csv
import random
import statistics
from dataclasses import dataclass
from pathlib import Path

from simulator.workload import percentile


@dataclass(frozen=True)
class StressSpec:
    mean: float = 0.7  # mean speed of a body pair
    spread: float = 0.1  # standard deviation of a body pair's speed
    tail_frac: float = 0.1  # share of pairs far below the mean
    tail_max: float = 0.3  # a tail pair's speed is uniform in [0.01, tail_max]
    zero_frac: float = 0.05  # share of pairs that cannot run together
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.mean < 1.0:
            raise ValueError(f"--mean is a speed in (0, 1), not {self.mean}")
        if not 0.0 < self.spread ** 2 < self.mean * (1.0 - self.mean):
            raise ValueError(f"--spread must be above 0 and below sqrt(mean x (1 - mean)) = "
                             f"{(self.mean * (1 - self.mean)) ** 0.5:.3f}")
        if not 0.01 < self.tail_max < self.mean:
            raise ValueError("--tail-max must be above 0.01 and below --mean")
        if not (self.tail_frac >= 0 and self.zero_frac >= 0  # NaN fails these too
                and self.tail_frac + self.zero_frac <= 1):
            raise ValueError("--tail-frac and --zero-frac are shares >= 0 summing to at most 1")


def stress_pairs(keys: list[str], spec: StressSpec) -> dict[tuple[str, str], float]:
    """``(workload, beside) -> speed`` for every ordered pair of ``keys``."""
    rng = random.Random(spec.seed)
    k = spec.mean * (1.0 - spec.mean) / spec.spread ** 2 - 1.0
    alpha, beta = spec.mean * k, (1.0 - spec.mean) * k
    out: dict[tuple[str, str], float] = {}
    for i, a in enumerate(keys):
        for b in keys[i:]:
            u = rng.random()
            if u < spec.zero_frac:
                pair = (0.0, 0.0)
            elif u < spec.zero_frac + spec.tail_frac:
                pair = (rng.uniform(0.01, spec.tail_max), rng.uniform(0.01, spec.tail_max))
            else:
                pair = (rng.betavariate(alpha, beta), rng.betavariate(alpha, beta))
            out[(a, b)] = round(pair[0], 4)
            out[(b, a)] = round(pair[1] if a != b else pair[0], 4)
    return out


def describe(speeds: list[float]) -> dict:
    """Mean, p5, p50 and the share at 0 of a table's speeds."""
    if not speeds:
        return {"pairs": 0}
    return {"pairs": len(speeds), "mean": round(statistics.fmean(speeds), 4),
            "p5": round(percentile(speeds, 5), 4), "p50": round(percentile(speeds, 50), 4),
            "below_0.5": round(sum(s < 0.5 for s in speeds) / len(speeds), 4),
            "zero": round(sum(s == 0 for s in speeds) / len(speeds), 4)}


def write_pairs(path: str | Path, speeds: dict[tuple[str, str], float]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(("workload", "beside", "speed"))
        for (a, b), s in speeds.items():
            w.writerow((a, b, f"{s:.4f}"))
