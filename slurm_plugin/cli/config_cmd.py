"""`gpupack config`: check a gpupack.toml offline, print the settings reference."""
from __future__ import annotations

from pathlib import Path

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def config() -> None:
    """Check gpupack.toml, or print its reference."""


@config.command()
@click.argument("file", type=click.Path(path_type=Path))
def check(file: Path) -> None:
    """Check FILE as the helper would load it: every table, key, type and range. Exit status 1
    with every problem listed (key, value, what is allowed) when it would be refused."""
    from slurm_plugin.config.whole import check_file

    problems = check_file(file)
    if problems:
        for problem in problems:
            click.echo(f"Error: {problem}", err=True)
        raise SystemExit(1)
    click.echo(f"{file}: ok")


@config.command()
def reference() -> None:
    """Print the settings reference (docs/config.md) generated from the schema."""
    from slurm_plugin.config.reference import render

    click.echo(render(), nl=False)
