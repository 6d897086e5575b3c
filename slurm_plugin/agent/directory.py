"""Where each node's agent listens, and the link's settings (gpupack.toml ``[agent]``, ``[agents]``).

- ``[agent] port`` (default 6820): every agent's command port, on its node's address; the
  helper finds the address as ``NodeAddr`` of ``scontrol show node`` (the node's name when
  Slurm gives none).
- ``[agents]``: an explicit map, node -> "host:port", which wins over the above (the one-host
  dev cluster writes one: all agents on 127.0.0.1, a port each).
- ``[agent] munge_socket``: munged's socket on this host (Debian's default below).
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packer.settings_schema import ConfigError, check_fields, setting
from slurm_plugin.munge_auth import DEFAULT_SOCKET, MAX_AGE_S

log = logging.getLogger(__name__)

DEFAULT_AGENT_PORT = 6820
ADDRESS_REFRESH_S = 60.0  # NodeAddr is asked of Slurm again after this long, or for a new node


@dataclass(frozen=True)
class AgentAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str, where: str) -> "AgentAddress":
        host, sep, port = str(text).rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{where} must be \"host:port\", got {text!r}")
        return cls(host.strip("[]"), int(port))


@dataclass(frozen=True)
class AgentSettings:
    """The ``[agent]`` table (the ``[agents]`` map rides along in ``agents``)."""

    port: int = setting(DEFAULT_AGENT_PORT, gt=0, lt=65536)
    munge_socket: str = str(DEFAULT_SOCKET)
    max_age_s: float = setting(MAX_AGE_S, gt=0)  # a credential older (or newer) than this is refused
    stale_after_s: float = setting(15.0, gt=0)  # a node whose newest sampling round is older is stale
    timeout_s: float = setting(2.0, gt=0)  # per request of the helper to an agent
    # the MPS control program the agents run (one daemon per GPU with MPS shares), a command line
    mps_control: str = setting("nvidia-cuda-mps-control", pattern=r"\S.*", means="a command")
    # DCGM's dcgmi, a command line: activity per MIG instance (DCGM_FI_PROF_GR_ENGINE_ACTIVE)
    dcgmi: str = setting("dcgmi", pattern=r"\S.*", means="a command")
    # Python jobs in packed steps load the out-of-memory observer (docs/oom-restart.md)
    python_oom_observer: bool = False
    # the [agents] table, parsed (`parse_agents`): not a key of [agent]
    agents: Mapping[str, AgentAddress] = field(default_factory=dict, metadata={"internal": True})

    def __post_init__(self) -> None:
        check_fields(self, "agent")

    def own_address(self, node: str, slurm_conf: Path | None = None) -> AgentAddress:
        """Where the agent of ``node`` binds: its ``[agents]`` entry, else its NodeAddr in
        slurm.conf and ``[agent] port``."""
        if node in self.agents:
            return self.agents[node]
        return AgentAddress(node_addr_in_conf(node, slurm_conf) or node, self.port)


def parse_agents(table: object, path: str | Path | None) -> dict[str, AgentAddress]:
    """The ``[agents]`` table (node = "host:port"), each address checked."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [agents] must be a table of node = \"host:port\"")
    return {str(node): AgentAddress.parse(addr, f"{path}: [agents] {node}") for node, addr in table.items()}


def node_addr_in_conf(node: str, slurm_conf: Path | None) -> str | None:
    """NodeAddr of ``node`` in slurm.conf (None when it has none, or the file is unreadable)."""
    from slurm_plugin.metrics.ports import slurm_conf_path
    from slurm_plugin.slurm.conf_file import conf_settings
    from slurm_plugin.slurm.gres import expand_hostlist

    try:
        text = slurm_conf_path(slurm_conf).read_text()
    except OSError:
        return None
    for pairs in conf_settings(text):
        names, addrs = pairs.get("nodename"), pairs.get("nodeaddr")
        if names and addrs:
            hosts, addr_list = expand_hostlist(names), expand_hostlist(addrs)
            if node in hosts:
                return addr_list[hosts.index(node)] if len(addr_list) == len(hosts) else addr_list[0]
    return None


class AgentDirectory:
    """node -> AgentAddress for the helper: ``[agents]`` first, else NodeAddr (asked of Slurm
    through ``node_addrs``, cached) and ``[agent] port``."""

    def __init__(self, settings: AgentSettings, node_addrs: Callable[[], Mapping[str, str]] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.node_addrs = node_addrs
        self.clock = clock
        self._addrs: dict[str, str] = {}
        self._asked = -ADDRESS_REFRESH_S
        self._lock = threading.Lock()

    def nodes(self) -> list[str]:
        """Every node an agent is known for (the map's, and Slurm's)."""
        self._refresh(force=False)
        return sorted(set(self.settings.agents) | set(self._addrs))

    def __call__(self, node: str) -> AgentAddress | None:
        if node in self.settings.agents:
            return self.settings.agents[node]
        self._refresh(force=node not in self._addrs)
        host = self._addrs.get(node)
        return AgentAddress(host, self.settings.port) if host else None

    def _refresh(self, force: bool) -> None:
        if self.node_addrs is None:
            return
        with self._lock:
            now = self.clock()
            if now - self._asked < (1.0 if force else ADDRESS_REFRESH_S):
                return
            self._asked = now
            try:
                self._addrs = dict(self.node_addrs())
            except Exception as exc:  # Slurm hiccup: keep what we had
                log.warning("cannot list the nodes' addresses from Slurm (%s); keeping %d known", exc,
                            len(self._addrs))
