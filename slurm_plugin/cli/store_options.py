"""The `--config`/`--database` options of the commands that read the SQLite database
(`gpupack events`, `gpupack actions`), and opening that database for them."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from slurm_plugin.helper.settings import DEFAULT_CONFIG

if TYPE_CHECKING:
    from store.db import Store

F = TypeVar("F", bound=Callable)


def database_options(holds: str) -> Callable[[F], F]:
    """`--config` (whose [paths] database holds `holds`) and `--database` (overrides it)."""
    def decorate(command: F) -> F:
        command = click.option("--database", type=click.Path(path_type=Path), default=None,
                               help="The SQLite database to read (overrides --config).")(command)
        return click.option("--config", type=click.Path(path_type=Path), default=DEFAULT_CONFIG, show_default=True,
                            help=f"gpupack.toml whose [paths] database holds {holds}.")(command)
    return decorate


@contextmanager
def opened_store(config: Path, database: Path | None) -> Iterator[Store]:
    """The database named by `database`, else by `config`'s [paths]; closed on leaving. A
    ClickException when the config is wrong, the database is missing or cannot be read."""
    from packer.config import ConfigError
    from store.db import Store, StoreError
    from slurm_plugin.helper.settings import load_paths

    try:
        path = database or load_paths(config).database
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    if not Path(path).exists():
        raise click.ClickException(f"no gpupack database at {path}; is the helper running? (--database PATH)")
    try:
        store = Store(path)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        yield store
    finally:
        store.close()
