"""The `[metrics]` table of gpupack.toml: where the helper's two endpoints listen."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from packer.config import ConfigError
from packer.settings_schema import check_fields, setting
from slurm_plugin.config.toml_file import read_table
from slurm_plugin.metrics.ports import DEFAULT_HOST, Address, agent_port, helper_ports, slurm_conf_path


@dataclass(frozen=True)
class MetricsSettings:
    address: str = DEFAULT_HOST  # bind address of both helper endpoints
    submit_port: int | None = setting(None, ge=0, le=65535)  # None: SlurmctldPort + 20; 0: no endpoint
    watch_port: int | None = setting(None, ge=0, le=65535)  # None: SlurmctldPort + 21; 0: no endpoint
    agent_address: str = DEFAULT_HOST  # bind address of the node agents' endpoints
    agent_port: int | None = setting(None, ge=0, le=65535)  # None: the node's slurmd port + 200; 0: no endpoint

    def __post_init__(self) -> None:
        check_fields(self, "metrics")
        for name in ("address", "agent_address"):
            try:
                ipaddress.ip_address(getattr(self, name))
            except ValueError:
                raise ConfigError(f"[metrics] {name} must be an IP address to bind (e.g. 127.0.0.1), "
                                  f"got {getattr(self, name)!r}") from None

    def submit(self, slurm_conf: Path) -> Address:
        port = self.submit_port if self.submit_port is not None else helper_ports(slurm_conf)[0]
        return Address(self.address, port)

    def watch(self, slurm_conf: Path) -> Address:
        port = self.watch_port if self.watch_port is not None else helper_ports(slurm_conf)[1]
        return Address(self.address, port)

    def agent(self, slurm_conf: Path, node: str) -> Address:
        port = self.agent_port if self.agent_port is not None else agent_port(slurm_conf, node)
        return Address(self.agent_address, port)


def load_metrics_settings(path: Path | None) -> MetricsSettings:
    return MetricsSettings(**read_table(path, "metrics", MetricsSettings))


@dataclass(frozen=True)
class MetricsOverride:
    """The command line's `--metrics-address` / `--metrics-port`, over gpupack.toml [metrics].

    `port` is this process's endpoint; with role `all` the watcher it starts takes port + 1."""

    host: str | None = None
    port: int | None = None

    def _resolve(self, config_path: Path | None, slurm_conf: Path | None, side: str) -> Address:
        settings = load_metrics_settings(config_path)
        conf = slurm_conf_path(slurm_conf)
        address = settings.submit(conf) if side == "submit" else settings.watch(conf)
        return Address(self.host or address.host, self.port if self.port is not None else address.port)

    def submit(self, config_path: Path | None, slurm_conf: Path | None) -> Address:
        return self._resolve(config_path, slurm_conf, "submit")

    def watch(self, config_path: Path | None, slurm_conf: Path | None) -> Address:
        return self._resolve(config_path, slurm_conf, "watch")

    def agent(self, config_path: Path | None, slurm_conf: Path | None, node: str) -> Address:
        address = load_metrics_settings(config_path).agent(slurm_conf_path(slurm_conf), node)
        return Address(self.host or address.host, self.port if self.port is not None else address.port)

    def for_watcher(self) -> list[str]:
        """The options that pass this override on to the watcher process."""
        args = ["--metrics-address", self.host] if self.host else []
        if self.port is not None:
            args += ["--metrics-port", str(self.port + 1 if self.port else 0)]
        return args
