"""`gpupack root`: the Debian roots that provide Slurm releases other than the host's."""
from __future__ import annotations

import json
import sys

import click

from slurm_plugin.devcluster import roots

CTX = {"help_option_names": ["-h", "--help"]}
series_option = click.option(
    "--slurm", "series", type=click.Choice(sorted(roots.SUITES)), envvar="GPUPACK_SLURM", required=True,
    help="The Slurm release series (env GPUPACK_SLURM).",
)


def _root(series: str) -> roots.SlurmRoot | None:
    try:
        return roots.for_series(series)
    except roots.RootError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group(context_settings=CTX)
def root() -> None:
    """Debian roots with other Slurm releases (22.05: bookworm, 24.11: trixie, 26.05: sid)."""


@root.command(context_settings=CTX)
@series_option
@click.option("--rebuild", is_flag=True, help="Build it anew even when it is healthy.")
def build(series: str, rebuild: bool) -> None:
    """Build (or update) the root for a release; kept between runs."""
    r = _root(series)
    if r is None:
        click.echo(f"Slurm {series} is this host's own release: no root needed")
        return
    try:
        info = roots.ensure(r, rebuild=rebuild)
    except roots.RootError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"slurm {info['slurm']} in Debian {info['suite']} root {r.path} (python {info['python']})")


@root.command(context_settings={**CTX, "ignore_unknown_options": True})
@series_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(series: str, command: tuple[str, ...]) -> None:
    """Run COMMAND (after `--`) in this checkout, on that release. The host's: run as is."""
    r = _root(series)
    if r is None:
        sys.exit(roots.run_forwarding(list(command)))
    try:
        roots.ensure(r)
    except roots.RootError as exc:
        raise click.ClickException(str(exc)) from exc
    sys.exit(roots.exec_in(r, list(command)))


@root.command(context_settings=CTX)
@series_option
def status(series: str) -> None:
    """Where a release comes from, and whether its root is built and healthy (JSON)."""
    click.echo(json.dumps(roots.status(series), indent=1))


@root.command(context_settings=CTX)
@series_option
def unmount(series: str) -> None:
    """Take away the root's bind mounts (after `gpupack devcluster down --slurm V`)."""
    r = _root(series)
    if r is not None:
        for target in roots.unmount(r):
            click.echo(f"unmounted {target}")
