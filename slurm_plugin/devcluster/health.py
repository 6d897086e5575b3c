"""How the dev cluster is: each registered process alive and answering (``devcluster
status``), node states, where the helper's metrics and the web view answer."""
from __future__ import annotations

import logging
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from slurm_plugin.devcluster.commands import run_slurm
from slurm_plugin.devcluster.node_side import agent_backend
from slurm_plugin.devcluster.processes import Process, ProcessRegistry, child_with
from slurm_plugin.devcluster.spec import ClusterSpec

log = logging.getLogger(__name__)

__all__ = ["ClusterHealth", "ProcessStatus", "node_usable", "web_ok"]

VIEW_FRESH_S = 30  # the watcher's cluster view is fresh when younger than this


@dataclass
class ProcessStatus:
    role: str
    name: str
    pid: int
    alive: bool
    healthy: bool
    detail: str
    metrics_url: str | None = None  # its Prometheus endpoint (None for Slurm's and munge's daemons)
    url: str | None = None  # where it listens: http:// (web view), tcp:// (Slurm), unix: (a socket)
    backend: str | None = None  # an agent's GPU backend ("nvml" in the dev cluster)
    host: str = ""  # the host it runs on: the machine's name (the controller's host) or a node's


class ClusterHealth:
    """Asks the cluster's processes how they are (reads only; starts and stops nothing)."""

    def __init__(self, spec: ClusterSpec, registry: ProcessRegistry):
        self.spec = spec
        self.registry = registry

    def status(self) -> list[ProcessStatus]:
        """One row per registered process (and the helper's watcher)."""
        out: list[ProcessStatus] = []
        states = self.node_states()
        for p in self.registry.load():
            pid = p.live_pid()
            p.pid = pid or p.pid
            out.extend(self._process_status(p, pid is not None, states))
        return out

    def node_states(self) -> dict[str, str]:
        """Each node's state as sinfo says it; empty when sinfo does not answer."""
        try:
            out = run_slurm(self.spec, "sinfo", "-h", "-N", "-o", "%N %T")
        except (OSError, subprocess.TimeoutExpired):
            return {}
        if out.returncode != 0:
            return {}
        return dict(line.split(None, 1) for line in out.stdout.splitlines() if " " in line)

    def helper_ok(self) -> bool:
        from slurm_plugin.helper.server import ask

        try:
            return ask(self.spec.helper_socket, {"op": "ping"}, timeout=1.0).get("status") == "ok"
        except OSError:
            return False

    def view_fresh(self) -> bool:
        """Whether the helper's watcher has published a cluster view lately."""
        view = self.spec.helper_socket.parent / "cluster-view.json"
        return view.exists() and time.time() - view.stat().st_mtime < VIEW_FRESH_S

    def metrics_url(self, role: str, name: str) -> str | None:
        """Where a daemon of this cluster serves its metrics: the same rule the daemon follows
        (gpupack.toml [metrics], else a port derived from this cluster's slurm.conf)."""
        from slurm_plugin.metrics.settings import MetricsOverride

        s = self.spec
        if role == "helper":
            return MetricsOverride().submit(s.gpupack_toml, s.slurm_conf).url
        if role == "watcher":
            return MetricsOverride().watch(s.gpupack_toml, s.slurm_conf).url
        if role == "agent":
            address = MetricsOverride().agent(s.gpupack_toml, s.slurm_conf, name)
            if s.multi_host and address.host in ("0.0.0.0", "::", ""):  # on the node's own address
                return f"http://{s.node_address(name)}:{address.port}/metrics"
            return address.url
        return None

    def listen_url(self, role: str, name: str) -> str | None:
        """Where a process listens (the web view's is read from its gpupack.toml)."""
        s = self.spec
        urls = {"slurmctld": f"tcp://{s.controller_address}:{s.port}", "munged": f"unix:{s.munge_socket}",
                "helper": f"unix:{s.helper_socket}"}
        if role == "slurmd" and name in s.node_names:
            return f"tcp://{s.node_address(name)}:{s.node_port(s.node_names.index(name) + 1)}"
        if role == "agent" and name in s.node_names:  # its MUNGE-authenticated command endpoint
            return f"http://{s.agent_address(name)}/"  # (SPANK reaches it by a socket on the node)
        return self.web_url() if role == "web" else urls.get(role)

    def web_url(self) -> str | None:
        """Where the cluster's web view answers, as its gpupack.toml says (the file the
        `web` process reads, whatever port this command line was given)."""
        from packer.config import ConfigError
        from slurm_plugin.web.settings import load_web_settings

        try:
            web = load_web_settings(self.spec.gpupack_toml)
        except ConfigError as exc:
            log.warning("%s", exc)
            return None
        if not web.port:
            return None
        host = "127.0.0.1" if web.bind in ("0.0.0.0", "") else ("[::1]" if web.bind == "::" else web.bind)
        return f"http://{host}:{web.port}{web.base_path.rstrip('/')}/"

    # -- one process ---------------------------------------------------------------------
    def _process_status(self, p: Process, alive: bool, states: dict[str, str]) -> list[ProcessStatus]:
        """The rows of one process: its own, and the watcher's after the helper's."""
        healthy, detail = alive, "running" if alive else "not running"
        host = p.host or socket.gethostname()
        extra: list[ProcessStatus] = []
        if alive and p.role == "slurmctld":
            ping = run_slurm(self.spec, "scontrol", "ping")
            healthy, detail = ping.returncode == 0 and "UP" in ping.stdout, ping.stdout.strip() or ping.stderr.strip()
        elif alive and p.role == "slurmd":
            st = states.get(p.name, "unknown")
            healthy, detail = node_usable(st), f"node state {st}"
        elif alive and p.role == "helper":
            healthy = self.helper_ok()
            detail = "answers on " + str(self.spec.helper_socket) if healthy else "socket does not answer"
            extra.append(self._watcher_status(p.pid))
        elif alive and p.role == "web":
            url = self.web_url()
            healthy, detail = web_ok(url) if url else (False, "no [web] port in the cluster's gpupack.toml")
        elif alive and p.role == "munged":
            socket_here = Path(f"/proc/{p.pid}/root") / self.spec.munge_socket.relative_to("/")
            healthy = socket_here.exists()
            detail = f"socket {self.spec.munge_socket}" + (f" on {p.host}" if p.host else "")
        elif alive and p.role == "host":
            detail = f"namespaces of {p.name}: address {self.spec.node_address(p.name)}, netns {self.spec.network.netns(p.name)}"
        backend = agent_backend(p.pid) if alive and p.role == "agent" else None
        return [*extra, ProcessStatus(p.role, p.name, p.pid, alive, healthy, detail, self.metrics_url(p.role, p.name),
                                      self.listen_url(p.role, p.name), backend=backend, host=host)]

    def _watcher_status(self, helper_pid: int) -> ProcessStatus:
        """The helper's watcher process (the helper starts it): alive, and its view fresh?"""
        pid = child_with(helper_pid, "--role")
        view = self.spec.helper_socket.parent / "cluster-view.json"
        try:
            age = time.time() - view.stat().st_mtime
        except OSError:
            age = None
        fresh = age is not None and age < VIEW_FRESH_S
        detail = f"cluster view {age:.1f} s old" if age is not None else "no cluster view yet"
        return ProcessStatus("watcher", "helper", pid or 0, pid is not None, pid is not None and fresh, detail,
                             self.metrics_url("watcher", "helper"), host=socket.gethostname())


def web_ok(url: str) -> tuple[bool, str]:
    """Whether the web view answers its health check (GET /healthz)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url + "healthz", timeout=2.0) as resp:
            return resp.status == 200, f"serves {url}"
    except (OSError, urllib.error.URLError) as exc:
        return False, f"{url} does not answer: {exc}"


def node_usable(state: str) -> bool:
    """Whether a node in this sinfo state can run jobs."""
    s = state.upper()
    return not any(bad in s for bad in ("DOWN", "DRAIN", "FAIL", "UNKNOWN", "NOT_RESPONDING", "*"))

