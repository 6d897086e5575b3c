"""`gpupack web`: the read-only web view of nodes, GPUs, slices, jobs and events."""
from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

import click

from slurm_plugin.helper.settings import DEFAULT_CONFIG

log = logging.getLogger(__name__)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", type=click.Path(path_type=Path), default=DEFAULT_CONFIG, show_default=True,
              help="gpupack.toml: [web] (bind, port, allow, refresh_s), [paths] and [packer].")
@click.option("--bind", default=None, help="Address to listen on (default [web] bind, 127.0.0.1).")
@click.option("--port", type=int, default=None, help="TCP port (default [web] port; 0 there means off).")
@click.option("--allow", multiple=True, help="A client network that may see the view (repeatable; "
              "replaces [web] allow, e.g. --allow 10.1.0.0/16 --allow 127.0.0.1/32).")
def web(config: Path, bind: str | None, port: int | None, allow: tuple[str, ...]) -> None:
    """Serve the web view (read-only) until stopped.

    Open http://127.0.0.1:PORT/ on the controller (an SSH tunnel from elsewhere), or let
    other hosts in with --bind 0.0.0.0 and --allow NETWORK, or put it behind the site's
    proxy ([web] base_path). The dev cluster runs one on its port + 80.
    """
    from packer.config import ConfigError
    from slurm_plugin.config.toml_file import load_config
    from slurm_plugin.helper.settings import load_paths
    from slurm_plugin.web.server import WebServer
    from slurm_plugin.web.settings import load_web_settings
    from slurm_plugin.web.source import WebSource

    try:
        settings = load_web_settings(config, bind=bind, port=port, allow=list(allow) or None)
        paths = load_paths(config)
        packer_config = load_config(config)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    if settings.port == 0:
        raise click.ClickException(f"no port: set [web] port in {config} or give --port")
    source = WebSource(config, paths, packer_config, settings)
    try:
        server = WebServer(settings, source)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {settings.bind}:{settings.port}: {exc}") from exc
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    server.serve_in_thread()
    log.warning("web view on %s (clients from %s)", server.url, ", ".join(settings.allow))
    click.echo(f"web view on {server.url}", err=True)
    done.wait()
    server.shutdown()
    server.server_close()
    source.close()
