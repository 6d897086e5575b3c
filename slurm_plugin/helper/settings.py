"""The `[paths]` table of gpupack.toml: where things live (the file is read by `slurm_plugin.config`)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from packer.settings_schema import check_fields
from slurm_plugin.config.toml_file import read_table

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

    def __post_init__(self) -> None:
        check_fields(self, "paths")  # a string where a path is expected becomes that path


def load_paths(path: Path) -> Paths:
    return Paths(**read_table(path, "paths", Paths))
