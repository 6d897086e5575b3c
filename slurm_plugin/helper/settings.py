"""The helper's settings file (gpupack.toml): the [packer] table and where things live."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from packer.config import ConfigError, PackerConfig, load_config, read_table

log = logging.getLogger(__name__)

DEFAULT_CONFIG = Path(os.environ.get("GPUPACK_CONFIG", "/etc/slurm/gpupack.toml"))


@dataclass(frozen=True)
class Paths:
    database: Path = Path("/var/lib/gpupack/gpupack.db")
    socket: Path = Path("/run/gpupack/helper.sock")
    kill_switch: Path = Path("/etc/slurm/gpupack.disable")
    slurm_conf: Path | None = None
    simgpu_dir: Path | None = None
    agent_dir: Path | None = None  # where node agents keep their sockets and job summaries
    slurm_user: str = "slurm"


def load_paths(path: Path) -> Paths:
    table = read_table(path, "paths", Paths)
    values = {k: (v if k == "slurm_user" else Path(v)) for k, v in table.items()}
    return Paths(**values)


class ReloadingConfig:
    """The [packer] table, re-read when the file changes; a bad edit keeps the last good one."""

    def __init__(self, path: Path):
        self.path = path
        self._path_text = os.fspath(path)
        self._mtime: int | None = None
        self._config = load_config(path)
        self._mtime = self._stat()

    def _stat(self) -> int | None:
        try:
            return os.stat(self._path_text).st_mtime_ns  # on every submission: no pathlib
        except OSError:
            return None

    def __call__(self) -> PackerConfig:
        mtime = self._stat()
        if mtime != self._mtime:
            self._mtime = mtime
            try:
                self._config = load_config(self.path)
                log.info("reloaded %s: mode=%s", self.path, self._config.mode)
            except ConfigError as exc:
                log.error("keeping the previous settings: %s", exc)
        return self._config
