"""Measured co-location slowdowns and workload profiles (Lucid traces), as a small table.

``pair_speeds.json`` (next to this file) is derived from
``shared/data/traces/colocation_pairs.csv`` and ``workload_profiles.csv`` by
``python -m simjobs.pairs PAIRS_CSV PROFILES_CSV``: for each ordered pair of
models, the mean over every measured variant (dataset, batch size, AMP) of the first
model's speed beside the second, relative to running alone; for each model, its mean GPU
utilisation, memory (MiB) and speed alone.

Lookup rules (pure functions):
- model names match case-insensitively;
- a pair never measured runs at :data:`DEFAULT_PAIR_SPEED` (0.95: a mild 5 % loss,
  below the helper's default 10 % contention threshold), overridable by the
  ``GPUPACK_SIM_DEFAULT_PAIR_SPEED`` environment variable in the workload;
- a measured speed above 1.0 (noise: packing never makes a job faster) counts as 1.0;
- beside several neighbours, the speeds multiply.
"""
from __future__ import annotations

import csv
import json
import sys
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from statistics import mean

DEFAULT_PAIR_SPEED = 0.95
DEFAULT_UTIL_PCT = 50.0
TABLE = Path(__file__).with_name("pair_speeds.json")


def build_table(pairs_csv: Path, profiles_csv: Path) -> dict:
    speeds: dict[tuple[str, str], list[float]] = defaultdict(list)
    with open(pairs_csv, newline="") as fh:
        for row in csv.DictReader(fh):
            a, b = row["model1"], row["model2"]
            speeds[(a, b)].append(float(row["speed1"]))
            speeds[(b, a)].append(float(row["speed2"]))
    prof: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    with open(profiles_csv, newline="") as fh:
        for row in csv.DictReader(fh):
            for key in ("speed", "gpu_util", "gmem"):
                prof[row["model"]][key].append(float(row[key]))
    return {
        "source": [Path(pairs_csv).name, Path(profiles_csv).name],
        "pairs": {f"{a}|{b}": round(mean(v), 4) for (a, b), v in sorted(speeds.items())},
        "workloads": {m: {"speed": round(mean(d["speed"]), 3), "util_pct": round(mean(d["gpu_util"]), 2),
                          "gmem_mib": round(mean(d["gmem"]), 1)} for m, d in sorted(prof.items())},
    }


@lru_cache(maxsize=1)
def load_table(path: str = str(TABLE)) -> dict:
    doc = json.loads(Path(path).read_text())
    return {
        "pairs": {tuple(k.lower().split("|", 1)): float(v) for k, v in doc["pairs"].items()},
        "workloads": {k.lower(): v for k, v in doc["workloads"].items()},
    }


def pair_speed(me: str | None, other: str | None, table: dict | None = None,
               default: float = DEFAULT_PAIR_SPEED) -> float:
    """``me``'s speed beside ``other`` relative to alone (0 < speed <= 1)."""
    table = table or load_table()
    if me and other:
        speed = table["pairs"].get((me.lower(), other.lower()))
        if speed is not None:
            return max(0.01, min(1.0, speed))
    return default


def packed_speed(me: str | None, neighbours: list[str], table: dict | None = None,
                 default: float = DEFAULT_PAIR_SPEED) -> float:
    """``me``'s speed beside all of ``neighbours`` (the product of the pair speeds)."""
    speed = 1.0
    for other in neighbours:
        speed *= pair_speed(me, other, table, default)
    return speed


def workload_util(me: str | None, table: dict | None = None) -> float:
    table = table or load_table()
    prof = table["workloads"].get((me or "").lower())
    return float(prof["util_pct"]) if prof else DEFAULT_UTIL_PCT


def known_workloads() -> list[str]:
    return sorted(json.loads(TABLE.read_text())["workloads"])


if __name__ == "__main__":  # regenerate the table
    if len(sys.argv) != 3:
        sys.exit("usage: python -m simjobs.pairs colocation_pairs.csv workload_profiles.csv")
    TABLE.write_text(json.dumps(build_table(Path(sys.argv[1]), Path(sys.argv[2])), indent=1) + "\n")
    print(f"wrote {TABLE}")
