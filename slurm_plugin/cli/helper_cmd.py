"""`gpupack helper`: the controller helper daemon."""
from __future__ import annotations

from pathlib import Path

import click

from slurm_plugin.helper.settings import DEFAULT_CONFIG


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", type=click.Path(path_type=Path), default=DEFAULT_CONFIG, show_default=True,
              help="gpupack.toml with the [packer] and [paths] tables.")
@click.option("--poll-interval", default=2.0, show_default=True, help="Seconds between cluster polls.")
def helper(config: Path, poll_interval: float) -> None:
    """Run the controller helper next to slurmctld (answers job_submit.lua on a Unix socket)."""
    import logging

    from packer.config import ConfigError
    from slurm_plugin.helper.daemon import Helper

    logging.getLogger().setLevel(min(logging.getLogger().level, logging.INFO))
    try:
        daemon = Helper(config, poll_interval=poll_interval)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    daemon.run()
