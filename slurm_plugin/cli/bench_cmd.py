"""`gpupack bench`: measured figures (never asserted by tests)."""
from __future__ import annotations

import json
from pathlib import Path

import click

from slurm_plugin.cli.slurm_choice import slurm_option
from slurm_plugin.devcluster.spec import DEFAULT_STATE_DIR

CTX = {"help_option_names": ["-h", "--help"]}


@click.group(context_settings=CTX)
def bench() -> None:
    """Benchmarks of the suite on the dev cluster."""


@bench.command(context_settings=CTX)
@slurm_option
@click.option("--jobs", default=500, show_default=True, type=click.IntRange(1),
              help="Held jobs to submit in each configuration (rounded down to whole blocks).")
@click.option("--block", default=25, show_default=True, type=click.IntRange(1),
              help="Jobs per block; blocks alternate with and without the shim in ABBA order.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--state-dir", type=click.Path(path_type=Path), default=DEFAULT_STATE_DIR, show_default=True,
              help="The dev cluster to measure on (it must be up).")
def submit(jobs: int, block: int, as_json: bool, state_dir: Path) -> None:
    """Submission rate with the shim and with JobSubmitPlugins unset, and the shim's p50/p99.

    Goal: ratio >= 0.9 and p99 < 5 ms. The shim is switched on and off between blocks with
    `scontrol reconfigure`; the benchmark's held jobs are cancelled at the end (no other
    job is touched).
    """
    from slurm_plugin.bench.submit import BenchError, as_dict, run_submit_bench
    from slurm_plugin.cli.devcluster_cmd import _cluster

    cluster = _cluster(state_dir)
    if not cluster._load():
        raise click.ClickException(f"the dev cluster in {state_dir} is not up: run `gpupack devcluster up` first")
    try:
        result = run_submit_bench(cluster, jobs=jobs, block=block)
    except BenchError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(as_dict(result), indent=1))
    else:
        for key, value in as_dict(result).items():
            click.echo(f"{key:24} {value}")


@bench.command(context_settings=CTX)
@slurm_option
@click.option("--finished", default=3000, show_default=True, type=click.IntRange(0),
              help="Held jobs of its own to submit and cancel first: finished records stay MinJobAge.")
@click.option("--rounds", default=30, show_default=True, type=click.IntRange(1), help="Timed listings of each kind.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--state-dir", type=click.Path(path_type=Path), default=DEFAULT_STATE_DIR, show_default=True,
              help="The dev cluster to measure on (it must be up).")
def listing(finished: int, rounds: int, as_json: bool, state_dir: Path) -> None:
    """The watcher's job listing per round (jobs in play) against every job, with many finished."""
    from dataclasses import asdict

    from slurm_plugin.bench.listing import run_listing_bench
    from slurm_plugin.cli.devcluster_cmd import _cluster

    cluster = _cluster(state_dir)
    if not cluster._load():
        raise click.ClickException(f"the dev cluster in {state_dir} is not up: run `gpupack devcluster up` first")
    result = asdict(run_listing_bench(cluster, finished=finished, rounds=rounds))
    if as_json:
        click.echo(json.dumps(result, indent=1))
    else:
        for key, value in result.items():
            click.echo(f"{key:24} {value}")
