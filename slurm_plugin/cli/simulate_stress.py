"""`gpupack simulate stress-pairs`: write a pair table unlike the measured one (for --truth)."""
from __future__ import annotations

import json

import click

from slurm_plugin.cli.simulate_base import CONTEXT_SETTINGS, library_errors


@click.command("stress-pairs", context_settings=CONTEXT_SETTINGS)
@click.option("--mean", type=float, default=0.7, show_default=True,
              help="Mean speed of a body pair (relative to running alone).")
@click.option("--spread", type=float, default=0.1, show_default=True,
              help="Standard deviation of a body pair's speed (Beta distribution).")
@click.option("--tail-frac", type=click.FloatRange(0, 1), default=0.1, show_default=True,
              help="Share of pairs in the tail, far below the mean.")
@click.option("--tail-max", type=float, default=0.3, show_default=True,
              help="A tail pair's speed is uniform in [0.01, this].")
@click.option("--zero-frac", type=click.FloatRange(0, 1), default=0.05, show_default=True,
              help="Share of pairs that cannot run together (speed 0 both ways).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the draw.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Folder with workload_profiles.csv and colocation_pairs.csv (default: "
                   "$GPUPACK_DATA_DIR or shared/data/traces).")
@click.option("-o", "--out", "out_path", type=click.Path(dir_okay=False, writable=True),
              required=True, help="The table to write (workload,beside,speed).")
@library_errors
def stress_pairs(mean, spread, tail_frac, tail_max, zero_frac, seed, data_dir, out_path):
    """Write a pair table for every ordered pair of the measured workloads, drawn with a
    given mean, a tail far below it and some pairs that cannot run together; replay with it
    as the truth: `gpupack simulate --truth FILE` (docs/simulator.md).

    \b
    gpupack simulate stress-pairs --mean 0.7 --tail-frac 0.1 --tail-max 0.3 \\
        --zero-frac 0.05 -o stress.csv
    gpupack simulate compare --truth stress.csv --jobs 3000 --offered-loads 0.6,1.2 --seeds 0,1
    """
    from pathlib import Path

    from simulator.stress import StressSpec, describe, stress_pairs as draw, write_pairs
    from simulator.workload import load_profiles

    spec = StressSpec(mean=mean, spread=spread, tail_frac=tail_frac, tail_max=tail_max,
                      zero_frac=zero_frac, seed=seed)
    profiles, shipped = load_profiles(Path(data_dir) if data_dir else None)
    speeds = draw([p.key for p in profiles], spec)
    write_pairs(out_path, speeds)
    click.echo(json.dumps({"wrote": out_path, "stress": describe(list(speeds.values())),
                           "measured": describe(list(shipped.measured.values()))}))
