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
@click.option("--nodes", default=2000, show_default=True, type=click.IntRange(0),
              help="Nodes defined State=FUTURE beside the three real ones (no slurmd).")
@click.option("--gpus-per-node", default=8, show_default=True, type=click.IntRange(1, 64))
@click.option("--jobs", default=50000, show_default=True, type=click.IntRange(0),
              help="Pending GPU jobs queued through the shim.")
@click.option("--window", "window_s", default=600.0, show_default=True, type=click.FloatRange(10),
              help="Seconds of each window (without the suite, then with it).")
@click.option("--probe", "probe_s", default=2.0, show_default=True, type=click.FloatRange(0.1),
              help="Seconds between a user's sbatch / scontrol show job / squeue.")
@click.option("--workers", default=8, show_default=True, type=click.IntRange(1, 32),
              help="sbatch at a time while the queue fills.")
@click.option("--fill-max", "fill_max_s", default=0.0, show_default=True, type=click.FloatRange(0),
              help="Seconds the fill may take (0: no limit); the queue is then what was submitted by then.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("scale-bench"), show_default=True,
              help="Folder for scale.json, scale.md (the table) and scale.png (the plot, with matplotlib).")
@click.option("--lua-alone", is_flag=True,
              help="A third window between the two: job_submit/lua on with a script that does nothing "
                   "(what Slurm's Lua plugin costs by itself, before the suite's shim does anything).")
@click.option("--keep", is_flag=True, help="Keep the cluster's state folder (logs) after the run.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def scale(nodes: int, gpus_per_node: int, jobs: int, window_s: float, probe_s: float, workers: int,
          fill_max_s: float, lua_alone: bool, out: Path, keep: bool, as_json: bool) -> None:
    """What the suite costs slurmctld at a site's size, on a cluster of its own.

    NODES x GPUS-PER-NODE defined without slurmd, the dev cluster's three nodes busy, JOBS
    pending jobs queued through the shim; then a window without the suite and one with it:
    slurmctld's RPCs (sdiag), a user's sbatch/squeue/scontrol latency, the watcher's rounds,
    the submit path's p50/p99, the helper's memory and the store's size. Run as root.
    """
    from dataclasses import asdict

    from slurm_plugin.bench.scale import ScalePlan, run_scale_bench, table, write_outputs
    from slurm_plugin.bench.submit import BenchError
    from slurm_plugin.devcluster.errors import DevClusterError

    plan = ScalePlan(nodes=nodes, gpus_per_node=gpus_per_node, jobs=jobs, window_s=window_s, probe_s=probe_s,
                     workers=workers, fill_max_s=fill_max_s, lua_alone=lua_alone)
    try:
        result = asdict(run_scale_bench(plan, keep=keep))
    except (BenchError, DevClusterError) as exc:
        raise click.ClickException(str(exc)) from exc
    written = write_outputs(result, out)
    if as_json:
        click.echo(json.dumps(result, indent=1))
    else:
        click.echo(table(result))
        click.echo("written: " + ", ".join(str(p) for p in written))


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


@bench.command(context_settings=CTX)
@slurm_option
@click.argument("target", type=click.Choice(["helper", "agent", "link"]))
@click.option("--node", default="node1", show_default=True, help="agent, link: the node whose agent is flooded.")
@click.option("--from-node", default=None,
              help="Open the connections from this node's host (its network namespace; multi-host only), "
                   "not the controller's.")
@click.option("--connections", "-n", default=1000, show_default=True, type=int, help="Connections to open and hold.")
@click.option("--hold", "hold_s", default=20.0, show_default=True, type=float,
              help="Seconds to hold them (with --submit-jobs: at most; the flood ends when the benchmark does).")
@click.option("--user", default="nobody", show_default=True, help="The unprivileged user who floods.")
@click.option("--reopen/--no-reopen", default=False, show_default=True,
              help="Open again each connection the server closes or refuses, keeping N attempted for the whole hold.")
@click.option("--rate", default=0.0, show_default=True, type=float,
              help="Connections opened per second at most (0: as fast as they go).")
@click.option("--sample", "sample_s", default=0.5, show_default=True, type=float,
              help="Seconds between samples of the target's /proc status (at most 0.5).")
@click.option("--settle", "settle_s", default=3.0, show_default=True, type=float,
              help="Seconds sampled after the flood.")
@click.option("--baseline", "baseline_s", default=5.0, show_default=True, type=click.FloatRange(0.5),
              help="Seconds sampled before the flood (and the log's lines counted, for comparison).")
@click.option("--submit-jobs", default=0, show_default=True, type=click.IntRange(0),
              help="Also run `bench submit --jobs N` without the flood, then during it (the submit path's p50/p99).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--state-dir", type=click.Path(path_type=Path), default=DEFAULT_STATE_DIR, show_default=True,
              help="The dev cluster to flood (it must be up).")
def flood(target: str, node: str, from_node: str | None, connections: int, hold_s: float, user: str,
          reopen: bool, rate: float, sample_s: float, settle_s: float, baseline_s: float, submit_jobs: int, as_json: bool,
          state_dir: Path) -> None:
    """Flood a server of the dev cluster with an unprivileged user's connections, each holding a
    partial request; report the server's threads, memory and descriptors before, during and after,
    what became of the connections, and the log lines it cost.

    TARGET: the helper's Unix socket, NODE's agent Unix socket, or NODE's agent link (HTTP). Run as
    root: a forked child drops to --user before it connects.
    """
    from slurm_plugin.bench.flood import FloodError, FloodPlan, check_plan, dev_target, run_flood

    plan = FloodPlan(connections=connections, hold_s=hold_s, user=user, sample_s=sample_s, reopen=reopen,
                     rate=rate, settle_s=settle_s)
    try:
        check_plan(plan)
        where = dev_target(state_dir, target, node, from_node)
        result: dict = {}
        during = None
        if submit_jobs:
            from slurm_plugin.bench.submit import BenchError, as_dict, run_submit_bench
            from slurm_plugin.cli.devcluster_cmd import _cluster

            cluster = _cluster(state_dir)
            keys = ("shim_p50_ms", "shim_p99_ms", "shim_max_ms", "shim_samples", "with_shim_sbatch_median_ms",
                    "with_shim_rate_per_s", "ratio")

            def measure() -> dict:
                try:
                    got = as_dict(run_submit_bench(cluster, jobs=submit_jobs, block=min(25, submit_jobs)))
                except BenchError as exc:
                    return {"error": str(exc)}
                return {k: got[k] for k in keys}

            result["submit_without_flood"] = measure()
            during = measure
        summary, got = run_flood(where, plan, during=during, baseline_s=baseline_s)
        result = {**summary, **result}
        if submit_jobs:
            result["submit_during_flood"] = got
    except FloodError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(result, indent=1))
    else:
        for key, value in result.items():
            if key not in ("samples", "open_timeline"):
                click.echo(f"{key:26} {value}")


@bench.command("view-reads", context_settings=CTX)
@click.option("--nodes", default=2000, show_default=True, type=click.IntRange(1))
@click.option("--gpus-per-node", default=8, show_default=True, type=click.IntRange(1, 64))
@click.option("--running", default=16000, show_default=True, type=click.IntRange(0), help="Running jobs in the view.")
@click.option("--seconds", default=20.0, show_default=True, type=click.FloatRange(1))
@click.option("--loader/--no-loader", default=True, show_default=True,
              help="The view read by the submit side's loader thread, or by the requests themselves (as before).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def view_reads(nodes: int, gpus_per_node: int, running: int, seconds: float, loader: bool, as_json: bool) -> None:
    """A submission's time on a site-sized cluster view (p50/p99/max) while it is republished
    every second, as the watcher does."""
    import tempfile
    from dataclasses import asdict

    from slurm_plugin.bench.submit_profile import time_view_reads

    with tempfile.TemporaryDirectory() as folder:
        result = time_view_reads(Path(folder), nodes, gpus_per_node, running, seconds, loader)
    _print(asdict(result), as_json)


@bench.command("submit-profile", context_settings=CTX)
@click.option("--requests", default=300, show_default=True, type=click.IntRange(1))
@click.option("--lines", default=30, show_default=True, type=click.IntRange(1), help="pstats lines to print.")
@click.option("--state-dir", type=click.Path(path_type=Path), default=DEFAULT_STATE_DIR, show_default=True,
              help="The cluster whose gpupack.toml, store and published view the decisions read (it must be up).")
def submit_profile(requests: int, lines: int, state_dir: Path) -> None:
    """cProfile of the helper's submit handler on a running cluster's store and view (no socket)."""
    from slurm_plugin.bench.submit_profile import profile_submit
    from slurm_plugin.devcluster.files import slurm_release
    from slurm_plugin.devcluster.spec import ClusterSpec

    dialect = "gres:" if slurm_release()[:2] < (23, 11) else "gres/"
    got = profile_submit(ClusterSpec(state_dir=state_dir).gpupack_toml, requests, dialect, lines)
    click.echo(got.top)
    for key in ("requests", "p50_ms", "p99_ms", "unprofiled_p50_ms", "unprofiled_p99_ms", "verdicts"):
        click.echo(f"{key:20} {getattr(got, key)}")


def _print(result: dict, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(result, indent=1))
    else:
        for key, value in result.items():
            click.echo(f"{key:26} {value}")
