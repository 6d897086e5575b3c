"""`--slurm V`: run this very command on another Slurm release, inside its Debian root.

The option is eager: when V is not the host's own release, the command line is run again,
less the option, inside the root that ships V (built first if missing), and this process
exits with its status. On the host's own release (or without the option) nothing happens.
"""
from __future__ import annotations

import sys

import click

from slurm_plugin.devcluster.roots import SUITES


def _strip_slurm(argv: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == "--":
            return out + argv[i:]
        if arg == "--slurm":
            skip = True
            continue
        if arg.startswith("--slurm="):
            continue
        out.append(arg)
    return out


def _reexec(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if not value or ctx.resilient_parsing:
        return
    from slurm_plugin.devcluster import roots

    try:
        root = roots.for_series(value)
        if root is None:
            return
        roots.ensure(root)
    except roots.RootError as exc:
        raise click.ClickException(str(exc)) from exc
    args = _strip_slurm(sys.argv[1:])
    code = roots.exec_in(root, ["python3", "-m", "slurm_plugin", *args], env={"GPUPACK_SLURM": ""})
    ctx.exit(code)


def slurm_option(func):
    """Add `--slurm V` (env GPUPACK_SLURM) to a click command."""
    return click.option(
        "--slurm", type=click.Choice(sorted(SUITES)), envvar="GPUPACK_SLURM", is_eager=True,
        expose_value=False, callback=_reexec,
        help="Run on this Slurm release, from a Debian root the project builds (default: the host's own).",
    )(func)
