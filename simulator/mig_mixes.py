"""MIG placement on request mixes drawn from the public traces' job sizes.

The placement policies (``mig.policies``: ``fsm``, ``demand``, ``first-fit``) were tuned on
the named mixes of ``mig.bench``. Here each mix is one Philly virtual cluster (the
``cluster`` column of philly_jobs.csv: a team's jobs): its multi-GPU jobs ask for the whole
GPU (``7g.80gb``), each of its one-GPU jobs for the smallest instance holding the memory of
a workload profile (workload_profiles.csv, plus 10 % headroom) drawn from a handful of
profiles the team runs (2 to 6 of the 66, a seeded draw per mix). A stream of requests of
that mix (``mig.simulate.generate_stream``) is replayed from an empty GPU under each policy;
``demand`` sees only the history of requests it was given (its decayed counts). Reported per
mix: fragmentation rejections (refused while enough memory slices were free) of each
policy, and over all mixes the ratio to first-fit and the mixes where ``demand`` rejects
more than ``fsm``.

    python3 -m simulator.mig_mixes [--data-dir DIR] [--draws 4] [--streams 3]

Mixes no policy was chosen on (issue 34): ``--first-draw 4 --first-stream 3`` draws other
teams' profiles (draws 4, 5, ...) and other request streams (seeds 3, 4, ...).
"""
from __future__ import annotations

import argparse
import csv
import random
from collections import Counter, defaultdict
from pathlib import Path

from mig.catalog import load_catalog
from mig.fsm import get_space
from mig.simulate import generate_stream, run_events
from simulator.workload import default_data_dir

POLICIES = ("fsm", "demand", "first-fit")
HEADROOM = 1.1


def trace_mixes(data_dir: Path, names: list[str], slice_gib: dict[str, float], draws: int,
                first_draw: int = 0) -> dict[str, list[float]]:
    """Mix name -> weights over ``names``: each virtual cluster, ``draws`` seeded draws (seeds
    ``first_draw`` on)."""
    with open(data_dir / "workload_profiles.csv", newline="") as f:
        mems = [float(r["gmem"]) / 1024 for r in csv.DictReader(f)]
    by_vc: dict[str, list[int]] = defaultdict(list)
    with open(data_dir / "philly_jobs.csv", newline="") as f:
        for r in csv.DictReader(f):
            by_vc[r["cluster"]].append(int(float(r["num_gpus"])))
    ordered = sorted(names, key=lambda n: (slice_gib[n], n))
    whole = ordered[-1]

    def size(gib: float) -> str:
        return next((n for n in ordered if slice_gib[n] >= gib * HEADROOM), whole)

    out = {}
    for draw in range(first_draw, first_draw + draws):
        rng = random.Random(draw)
        for vc, gpus in sorted(by_vc.items()):
            team = rng.sample(mems, rng.randint(2, 6))
            counts = Counter(whole if g > 1 else size(rng.choice(team)) for g in gpus)
            out[f"{vc}/{draw}"] = [float(counts.get(n, 0)) for n in names]
    return out


def run(data_dir: Path, model: str = "H100-80GB", draws: int = 4, streams: int = 3, n_allocs: int = 1000,
        first_draw: int = 0, first_stream: int = 0) -> dict[str, dict[str, int]]:
    cat = load_catalog(model)
    names = [p.name for p in cat.profiles if not p.media_extensions]
    space = get_space(cat, tuple(names))
    per_slice = cat.memory_mib / 1024 / cat.memory_slices
    slice_gib = {p.name: p.memory_slices * per_slice for p in cat.profiles if not p.media_extensions}
    out = {}
    for mix, weights in trace_mixes(data_dir, names, slice_gib, draws, first_draw).items():
        totals = dict.fromkeys(POLICIES, 0)
        for seed in range(first_stream, first_stream + streams):
            events = generate_stream(names, weights, n_allocs, seed=seed, mean_live=5.0)
            for policy in POLICIES:
                totals[policy] += run_events(space, events, policy, seed=seed).rejected_fragmentation
        out[mix] = totals
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--draws", type=int, default=4)
    ap.add_argument("--streams", type=int, default=3)
    ap.add_argument("--model", default="H100-80GB")
    ap.add_argument("--first-draw", type=int, default=0, help="seed of the first team draw (held-out mixes: 4)")
    ap.add_argument("--first-stream", type=int, default=0, help="seed of the first request stream (held out: 3)")
    args = ap.parse_args(argv)
    if args.draws < 1 or args.streams < 1 or args.first_draw < 0 or args.first_stream < 0:
        raise SystemExit("--draws and --streams must be at least 1, --first-draw and --first-stream at least 0")
    data_dir = args.data_dir or default_data_dir()
    if data_dir is None:
        raise SystemExit("no data folder: pass --data-dir or set GPUPACK_DATA_DIR")
    res = run(data_dir, args.model, args.draws, args.streams, first_draw=args.first_draw,
              first_stream=args.first_stream)
    total = {p: sum(r[p] for r in res.values()) for p in POLICIES}
    worse = [m for m, r in res.items() if r["demand"] > r["fsm"]]
    print(f"{len(res)} mixes ({args.draws} draws from seed {args.first_draw} x {len(res) // max(1, args.draws)} "
          f"Philly virtual clusters), {args.streams} streams of 1000 requests each from seed {args.first_stream}, "
          f"{args.model}\n")
    print("| policy | fragmentation rejections | ÷ first-fit |\n|---|---|---|")
    for p in POLICIES:
        print(f"| {p} | {total[p]} | {total[p] / max(1, total['first-fit']):.3f} |")
    print(f"\nmixes where demand rejects more than fsm: {len(worse)} {worse}")


if __name__ == "__main__":
    main()
