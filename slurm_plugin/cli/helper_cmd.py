"""`gpupack helper`: the controller helper daemon."""
from __future__ import annotations

from pathlib import Path

import click

from slurm_plugin.helper.settings import DEFAULT_CONFIG


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", type=click.Path(path_type=Path), default=DEFAULT_CONFIG, show_default=True,
              help="gpupack.toml with the [packer] and [paths] tables.")
@click.option("--poll-interval", default=2.0, show_default=True, help="Seconds between cluster polls.")
@click.option("--role", type=click.Choice(["all", "submit", "watch"]), default="all", show_default=True,
              help="all: the submit side, which starts the watcher process itself; submit or watch: "
                   "one side only (to run them as two services).")
def helper(config: Path, poll_interval: float, role: str) -> None:
    """Run the controller helper next to slurmctld (answers job_submit.lua on a Unix socket).

    The submit side answers the shim from memory; the watcher process polls Slurm, publishes
    the cluster view beside the socket, and watches running jobs (contention, memory growth,
    history, MPS plans, metrics)."""
    import logging

    from packer.config import ConfigError
    from slurm_plugin.helper.daemon import run_role

    logging.getLogger().setLevel(min(logging.getLogger().level, logging.INFO))
    try:
        run_role(role, config, poll_interval)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
