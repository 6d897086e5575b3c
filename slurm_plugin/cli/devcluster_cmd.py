"""`gpupack devcluster`: a real Slurm GPU cluster on this machine."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

import click

from slurm_plugin.cli.slurm_choice import slurm_option
from slurm_plugin.devcluster.spec import DEFAULT_PORT, DEFAULT_STATE_DIR, PRIORITY_TYPES, ClusterSpec
from slurm_plugin.devcluster.topology import DEFAULT_TOPOLOGY, MULTI_HOST

CTX = {"help_option_names": ["-h", "--help"]}
state_dir_option = click.option(
    "--state-dir", type=click.Path(path_type=Path), default=DEFAULT_STATE_DIR, show_default=True,
    help="Folder for every config, log, socket and database of the cluster (env GPUPACK_DEVCLUSTER_DIR).",
)


def _cluster(state_dir: Path, **spec):
    from slurm_plugin.devcluster.manager import DevCluster

    saved = state_dir / "spec.json"
    if not spec and saved.exists():
        data = json.loads(saved.read_text())
        data["state_dir"] = Path(data["state_dir"])
        return DevCluster(ClusterSpec(**data))
    return DevCluster(ClusterSpec(state_dir=state_dir, **spec))


def _where(state_dir: Path) -> str:
    """The options that name this cluster again: its release (in a root) and its folder."""
    from slurm_plugin.devcluster.roots import installed_release

    text = f" --state-dir {state_dir}" if state_dir != DEFAULT_STATE_DIR else ""
    if os.environ.get("GPUPACK_ROOT"):
        release = installed_release(Path("/")) or ""
        text = f" --slurm {'.'.join(release.split('.')[:2])}" + text
    return text


@click.group(context_settings=CTX)
def devcluster() -> None:
    """Run a real local Slurm cluster (slurmctld, N slurmd, fake GPUs, the gpupack shim)."""


@devcluster.command(context_settings=CTX)
@slurm_option
@click.option("--nodes", default=3, show_default=True, help="Number of `slurmd -N nodeX` daemons.")
@click.option("--gpus-per-node", default=2, show_default=True, help="Fake GPUs per node.")
@click.option("--gpu-model", default="H100-80GB", show_default=True, help="GPU model (a MIG catalogue name).")
@click.option("--mode", type=click.Choice(["observe", "advise", "enforce"]), default="enforce", show_default=True,
              help="Packer mode; the dev cluster defaults to enforce so the demo shows packing.")
@click.option("--port", default=DEFAULT_PORT, show_default=True,
              help="slurmctld's port; node i listens on PORT+100+i (env GPUPACK_DEVCLUSTER_PORT).")
@click.option("--multi-host/--one-host", "multi_host", default=DEFAULT_TOPOLOGY == MULTI_HOST, show_default=True,
              help="Each node a host of its own (network, hostname and mount namespaces on a bridge; "
                   "docs/multi-host.md), or every daemon on this machine's one host.")
@click.option("--accounting/--no-accounting", default=False, show_default=True,
              help="slurmdbd with MariaDB (Debian's packages) on the controller's host: sacct, sacctmgr and "
                   "fair-share (docs/accounting.md).")
@click.option("--priority", type=click.Choice(PRIORITY_TYPES), default="basic", show_default=True,
              help="Slurm's priority plugin: basic (submit order) or multifactor (fair-share; needs --accounting "
                   "for usage and accounts).")
@state_dir_option
def up(nodes: int, gpus_per_node: int, gpu_model: str, mode: str, port: int, multi_host: bool, accounting: bool,
       priority: str, state_dir: Path) -> None:
    """Bring the cluster up (installs missing Debian packages as root). Idempotent."""
    from slurm_plugin.devcluster.manager import DevClusterError
    from slurm_plugin.devcluster.topology import ONE_HOST

    try:
        cluster = _cluster(state_dir, nodes=nodes, gpus_per_node=gpus_per_node, gpu_model=gpu_model, mode=mode,
                           port=port, topology=MULTI_HOST if multi_host else ONE_HOST, accounting=accounting,
                           priority=priority)
        state_dir.mkdir(parents=True, exist_ok=True)  # written first: `down` must know what to take away
        (state_dir / "spec.json").write_text(json.dumps(cluster.spec.to_json(), indent=1))
        statuses = cluster.up()
    except (DevClusterError, ValueError, KeyError) as exc:
        raise click.ClickException(str(exc)) from exc
    for st in statuses:
        click.echo(f"{st.role:10} {st.name:10} {st.host:10} pid={st.pid:<8} {'ok' if st.healthy else 'UNHEALTHY'}  {st.detail}")
    click.echo(f"\nUse it from a shell with:  eval \"$(gpupack devcluster env{_where(state_dir)})\"")


@devcluster.command(context_settings=CTX)
@slurm_option
@state_dir_option
def down(state_dir: Path) -> None:
    """Stop the processes `up` started, and only those. Jobs and history stay on disk."""
    stopped = _cluster(state_dir).down()
    click.echo("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@devcluster.command(context_settings=CTX)
@slurm_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@state_dir_option
def status(as_json: bool, state_dir: Path) -> None:
    """Every process the cluster started: role, name, host, pid, health, where it listens, metrics URL."""
    statuses = _cluster(state_dir).status()
    if as_json:
        click.echo(json.dumps([asdict(s) for s in statuses], indent=1))
    else:
        if not statuses:
            click.echo("the dev cluster is not running (gpupack devcluster up)")
        for st in statuses:
            metrics = f"  metrics {st.metrics_url}" if st.metrics_url else ""
            metrics += f"  url {st.url}" if st.url else ""
            click.echo(f"{st.role:10} {st.name:10} {st.host:10} pid={st.pid:<8} {'ok' if st.healthy else 'UNHEALTHY'}  {st.detail}{metrics}")
    if statuses and not all(s.healthy for s in statuses):
        sys.exit(1)


@devcluster.command(context_settings=CTX)
@slurm_option
@state_dir_option
def env(state_dir: Path) -> None:
    """Print the `export` lines that make plain sbatch/squeue/scontrol talk to the cluster."""
    for key, value in _cluster(state_dir).env().items():
        click.echo(f"export {key}={value}")
    root_bin = os.environ.get("GPUPACK_ROOT_BIN")
    if root_bin:  # run from a Debian root: its Slurm's commands, through wrappers on the host
        click.echo(f'export PATH="{root_bin}:$PATH"')
