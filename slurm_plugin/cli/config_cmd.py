"""`gpupack config`: check a gpupack.toml offline, print the settings reference."""
from __future__ import annotations

from pathlib import Path

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def config() -> None:
    """Check gpupack.toml, or print its reference."""


@config.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--plugstack", type=click.Path(path_type=Path), default=None,
              help="A node's plugstack.conf (e.g. /etc/slurm/plugstack.conf): the gpupack SPANK plugin must be "
                   "loaded 'required'.")
@click.option("--slurm-conf", type=click.Path(path_type=Path), default=None,
              help="slurm.conf (e.g. /etc/slurm/slurm.conf): no RequeueExit of 117.")
def check(file: Path, plugstack: Path | None, slurm_conf: Path | None) -> None:
    """Check FILE as the helper would load it: every table, key, type and range; and the Slurm files
    the suite's safety rests on (plugstack.conf's plugin line 'required', no RequeueExit=117). Exit
    status 1 with every problem listed (key, value, what is allowed) when one would be refused."""
    from slurm_plugin.config.slurm_files import check_plugstack_file, check_slurm_conf_file
    from slurm_plugin.config.whole import check_file

    problems = check_file(file)
    if plugstack is not None:
        problems += check_plugstack_file(plugstack)
    if slurm_conf is not None:
        problems += check_slurm_conf_file(slurm_conf)
    if problems:
        for problem in problems:
            click.echo(f"Error: {problem}", err=True)
        raise SystemExit(1)
    click.echo(f"{file}: ok" + "".join(f"; {p}: ok" for p in (plugstack, slurm_conf) if p is not None))


@config.command()
def reference() -> None:
    """Print the settings reference (docs/config.md) generated from the schema."""
    from slurm_plugin.config.reference import render

    click.echo(render(), nl=False)
