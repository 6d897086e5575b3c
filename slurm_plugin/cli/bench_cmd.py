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


@bench.command(context_settings=CTX)
@click.option("--requests", default=1000, show_default=True, type=click.IntRange(1),
              help="Authenticated `samples` requests, timed one by one.")
@click.option("--node", default=None, help="Ask this node's agent of the running dev cluster "
                                           "(--state-dir); without it, a standalone agent and a private munged.")
@click.option("--jobs", default=4, show_default=True, type=click.IntRange(0), help="Standalone: simulated jobs on the agent.")
@click.option("--munge", "munge_backend", type=click.Choice(["auto", "lib", "commands"]), default="auto",
              show_default=True, help="libmunge through ctypes, or the munge/unmunge commands.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--state-dir", type=click.Path(path_type=Path), default=DEFAULT_STATE_DIR, show_default=True,
              help="The dev cluster whose agent --node names.")
def link(requests: int, node: str | None, jobs: int, munge_backend: str, as_json: bool, state_dir: Path) -> None:
    """The helper -> agent request latency over the MUNGE-authenticated link (p50/p99)."""
    from dataclasses import asdict

    from slurm_plugin.bench.link import run_latency_bench, time_requests
    from slurm_plugin.munge_auth import MungeError

    try:
        if node is None:
            result = run_latency_bench(requests, jobs, munge_backend)
        else:
            from slurm_plugin.agent.client import AgentLink, link_from_config
            from slurm_plugin.devcluster.spec import ClusterSpec
            from slurm_plugin.munge_auth import Munge

            toml = ClusterSpec(state_dir=state_dir).gpupack_toml
            base = link_from_config(toml, {0})
            link_ = AgentLink(base.directory, Munge(base.munge.socket, munge_backend), {0})
            result = time_requests(link_, node, requests, f"agent of {node} ({base.directory(node)})")
    except (MungeError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    _print(asdict(result), as_json)


@bench.command(context_settings=CTX)
@click.option("--nodes", default=1000, show_default=True, type=click.IntRange(1))
@click.option("--jobs", default=3000, show_default=True, type=click.IntRange(0), help="Running jobs.")
@click.option("--pending", default=1000, show_default=True, type=click.IntRange(0), help="Pending jobs.")
@click.option("--rounds", default=5, show_default=True, type=click.IntRange(1))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def rpcs(nodes: int, jobs: int, pending: int, rounds: int, as_json: bool) -> None:
    """slurmctld RPCs per watcher round: agents polling squeue (before) and job lists pushed
    over the link (after), counted as commands in a fake Slurm."""
    from dataclasses import asdict

    from slurm_plugin.bench.link import run_rpc_count

    _print(asdict(run_rpc_count(nodes, jobs, pending, rounds)), as_json)


def _print(result: dict, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(result, indent=1))
    else:
        for key, value in result.items():
            click.echo(f"{key:26} {value}")
