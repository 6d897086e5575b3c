"""The `[paths]` table of gpupack.toml: where things live (the file is read by `slurm_plugin.config`)."""
from __future__ import annotations

import logging
import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from packer.settings_schema import check_fields
from slurm_plugin.config.toml_file import read_table

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

    def __post_init__(self) -> None:
        check_fields(self, "paths")  # a string where a path is expected becomes that path


def load_paths(path: Path) -> Paths:
    return Paths(**read_table(path, "paths", Paths))


def slurm_user_uid(name: str) -> set[int]:
    """The uid of the SlurmUser ``name`` (``[paths] slurm_user``), who may use the helper and
    sign the agents' answers besides root; empty where no such user exists."""
    try:
        return {pwd.getpwnam(name).pw_uid}
    except KeyError:
        log.warning("SlurmUser %r does not exist; only root may use the helper", name)
        return set()
