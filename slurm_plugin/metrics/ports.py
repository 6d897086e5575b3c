"""Where each daemon's metrics endpoint listens by default: derived from the cluster's ports.

Each daemon binds 127.0.0.1 and a port at a fixed offset from a Slurm port of its own
cluster, so two clusters side by side (a dev cluster beside a test cluster) never collide:

- the helper's submit side: SlurmctldPort + 20 (6837 with Slurm's default 6817);
- the helper's watcher:     SlurmctldPort + 21 (6838);
- the node agent of a node: that node's slurmd port + 200 (7018 with the default 6818).

All three read slurm.conf (`[paths] slurm_conf`, else SLURM_CONF, else /etc/slurm/slurm.conf).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from slurm_plugin.slurm.conf_file import conf_settings
from slurm_plugin.slurm.gres import expand_hostlist

log = logging.getLogger(__name__)

SLURMCTLD_DEFAULT_PORT = 6817
SLURMD_DEFAULT_PORT = 6818
SUBMIT_OFFSET = 20
WATCH_OFFSET = 21
AGENT_OFFSET = 200
DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True)
class Address:
    """A metrics endpoint: host and TCP port (port 0: no endpoint)."""

    host: str
    port: int

    @property
    def enabled(self) -> bool:
        return self.port > 0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"http://{host}:{self.port}/metrics"


def slurm_conf_path(configured: Path | None = None) -> Path:
    return Path(configured or os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf")


def _first_port(value: str) -> int:
    return int(value.split("-", 1)[0])  # SlurmctldPort may be a range, 6817-6818


def slurmctld_port(conf_text: str) -> int:
    for pairs in conf_settings(conf_text):
        if "slurmctldport" in pairs:
            return _first_port(pairs["slurmctldport"])
    return SLURMCTLD_DEFAULT_PORT


def slurmd_port(conf_text: str, node: str) -> int:
    """The port slurmd of `node` listens on: its NodeName line's Port=, else SlurmdPort."""
    default = SLURMD_DEFAULT_PORT
    for pairs in conf_settings(conf_text):
        if "slurmdport" in pairs:
            default = int(pairs["slurmdport"])
    for pairs in conf_settings(conf_text):
        name = pairs.get("nodename")
        if name and "port" in pairs and node in expand_hostlist(name):
            return int(pairs["port"])
    return default


def _read(conf: Path) -> str:
    try:
        return conf.read_text()
    except OSError as exc:
        log.info("cannot read %s (%s): metrics ports derive from Slurm's default ports", conf, exc)
        return ""


def helper_ports(conf: Path) -> tuple[int, int]:
    """(submit side, watcher) default ports for the cluster of this slurm.conf."""
    base = slurmctld_port(_read(conf))
    return base + SUBMIT_OFFSET, base + WATCH_OFFSET


def agent_port(conf: Path, node: str) -> int:
    return slurmd_port(_read(conf), node) + AGENT_OFFSET
