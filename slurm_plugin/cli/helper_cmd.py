"""`gpupack helper`: the controller helper daemon."""
from __future__ import annotations

from pathlib import Path

import click

from slurm_plugin.helper.settings import DEFAULT_CONFIG


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", type=click.Path(path_type=Path), default=DEFAULT_CONFIG, show_default=True,
              help="gpupack.toml: [packer], [paths], [monitor], [metrics].")
@click.option("--poll-interval", default=2.0, show_default=True, help="Seconds between cluster polls.")
@click.option("--role", type=click.Choice(["all", "submit", "watch"]), default="all", show_default=True,
              help="all: the submit side, which starts the watcher process itself; submit or watch: "
                   "one side only (to run them as two services).")
@click.option("--metrics-address", default=None, metavar="IP",
              help="Bind the metrics endpoints here [default: [metrics] address, else 127.0.0.1].")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="This process's metrics port, 0 for none; with role all the watcher takes PORT+1 "
                   "[default: [metrics] submit_port/watch_port, else SlurmctldPort+20/+21].")
def helper(config: Path, poll_interval: float, role: str, metrics_address: str | None,
           metrics_port: int | None) -> None:
    """Run the controller helper next to slurmctld (answers job_submit.lua on a Unix socket).

    The submit side answers the shim from memory; the watcher process polls Slurm, publishes
    the cluster view beside the socket, and watches running jobs (contention, memory growth,
    history, MPS plans, metrics)."""
    import logging

    from slurm_plugin.startup import keep_out_of_submit_side

    if role != "watch":  # before the submit side's imports (the watcher is a process of its own)
        keep_out_of_submit_side()
    from packer.config import ConfigError
    from slurm_plugin.helper.daemon import run_role
    from slurm_plugin.metrics.settings import MetricsOverride
    from slurm_plugin.startup import MissingDependency

    logging.getLogger().setLevel(min(logging.getLogger().level, logging.INFO))
    try:
        run_role(role, config, poll_interval, MetricsOverride(metrics_address, metrics_port))
    except (ConfigError, MissingDependency) as exc:
        raise click.ClickException(str(exc)) from exc
