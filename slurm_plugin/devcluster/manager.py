"""Bring the dev cluster up and down, and say how it is.

Every process it starts is written to run/processes.json with its role and pid; `down`
stops exactly those (after checking that the pid still runs our command line), and `up`
starts only what is not already running, so both are idempotent.

The pieces: :mod:`~slurm_plugin.devcluster.files` (config writing),
:mod:`~slurm_plugin.devcluster.processes` (the registry, pid checks),
:mod:`~slurm_plugin.devcluster.health` (status), :mod:`~slurm_plugin.devcluster.install`
(Debian packages). This module starts and stops the processes.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from slurm_plugin.devcluster import node_side
from slurm_plugin.devcluster.commands import cluster_env, run_slurm
from slurm_plugin.devcluster.errors import DevClusterError
from slurm_plugin.devcluster.files import slurm_release, write_files
from slurm_plugin.devcluster.health import ClusterHealth, ProcessStatus, node_usable, web_ok
from slurm_plugin.devcluster.hosts import NodeHosts, forward_filter_note
from slurm_plugin.devcluster.install import install_packages
from slurm_plugin.devcluster.processes import (Process, ProcessRegistry, alive_with, check_started, holding,
                                               started_pid, terminate)
from slurm_plugin.devcluster.spec import ClusterSpec

log = logging.getLogger(__name__)

__all__ = ["DevCluster", "DevClusterError", "Process", "ProcessStatus", "slurm_release"]

READY_TIMEOUT_S = 60
STOP_ORDER = {"web": 0, "helper": 0, "agent": 0, "slurmd": 1, "slurmctld": 2, "slurmdbd": 3, "mariadb": 4, "munged": 5,
              "host": 6}
ACCOUNTING_ROLES = ("mariadb", "slurmdbd")


#: the checkout this code lies in: its daemons run it, not whatever clone an editable install names
CODE = Path(__file__).resolve().parents[2]


def daemon_pythonpath(environ: dict[str, str] | None = None) -> str:
    """PYTHONPATH for the cluster's daemons: this checkout first. An agent on its node's host starts
    in that host's root folder, where the working folder no longer puts the checkout on the path
    (the helper's working folder did, by chance), so without it the host's editable install decided
    which code the agents ran."""
    rest = (os.environ if environ is None else environ).get("PYTHONPATH", "")
    return ":".join([str(CODE), *(p for p in rest.split(":") if p and p != str(CODE))])


class DevCluster:
    """Starts and stops the cluster's processes: munged, slurmctld, one slurmd per node,
    the helper, the node agents and the web view. Multi-host: each node's host first (its
    namespaces, see :mod:`~slurm_plugin.devcluster.hosts`), and its munged, slurmd and agent in it."""

    def __init__(self, spec: ClusterSpec):
        self.spec = spec
        self.registry = ProcessRegistry(spec.run / "processes.json")
        self.health = ClusterHealth(spec, self.registry)
        self.hosts = NodeHosts(spec) if spec.multi_host else None

    def env(self) -> dict[str, str]:
        return cluster_env(self.spec)

    def _slurm(self, *args: str, timeout: float = 15.0) -> subprocess.CompletedProcess:
        return run_slurm(self.spec, *args, timeout=timeout)

    def _load(self) -> list[Process]:
        return self.registry.load()

    def status(self) -> list[ProcessStatus]:
        return self.health.status()

    # -- up ------------------------------------------------------------------------------
    def up(self) -> list[ProcessStatus]:
        if os.geteuid() != 0:
            raise DevClusterError("the dev cluster needs root (munged, slurmd and fake device files)")
        install_packages(accounting=self.spec.accounting)
        build_node_side(self.spec)  # before the configs: plugstack.conf names what it built
        config_changed = write_files(self.spec)
        running = self.registry.running()
        if not self.hosts and any(p.role == "host" for p in running.values()):
            log.warning("the cluster ran on many hosts and is asked for one: taking it down first")
            self.down()
            running = self.registry.running()
        if config_changed and running:
            log.warning("the cluster's configuration changed: restarting its daemons")
            self.down(keep=("munged", "host", *(ACCOUNTING_ROLES if self.spec.accounting else ())))
            running = self.registry.running()
        procs = list(running.values())
        if self.hosts:
            self.hosts.start(running, procs, self.registry.save)
        for start in (self._start_munged, self._start_accounting, self._start_slurmctld, self._start_slurmds,
                      self._start_gpupack):
            start(running, procs)
        self._wait_ready()
        return self.status()

    def _on(self, node: str) -> list[str]:
        """The command prefix that runs a program on ``node``'s host (none on one host)."""
        return self.hosts.enter(node) if self.hosts and node else []

    def _seen_here(self, node: str, path: Path) -> Path:
        """A path on ``node``'s host, as this (the controller's) host reads it."""
        return self.hosts.path_on(node, path) if self.hosts and node else path

    def _start_munged(self, running: dict[tuple[str, str], Process], procs: list[Process]) -> None:
        """One munged per host, all with the cluster's key, each at the same socket path
        (on a node, in its own private run folder)."""
        s = self.spec
        for name in ["munged", *(s.node_names if self.hosts else [])]:
            if ("munged", name) in running:
                continue
            node = "" if name == "munged" else name
            logfile = s.run / "munge" / "munged.log"  # munged wants a folder only munge writes in
            pidfile = s.run / "munge" / "munged.pid"
            seen = self._seen_here(node, pidfile)
            seen.unlink(missing_ok=True)
            check_started(subprocess.run(
                [*self._on(node), "runuser", "-u", "munge", "--", "/usr/sbin/munged",
                 f"--socket={s.munge_socket}", f"--key-file={s.etc / 'munge.key'}", f"--pid-file={pidfile}",
                 f"--log-file={logfile}", f"--seed-file={s.run / 'munge' / 'seed'}"],
                capture_output=True, text=True), f"munged {node}".strip())
            pid = started_pid(seen, self._marker, f"munged {node}".strip(), self._seen_here(node, logfile.parent))
            procs.append(Process("munged", name, pid, self._marker, str(seen) if node else "", host=node))
            self.registry.save(procs)

    def _start_accounting(self, running: dict[tuple[str, str], Process], procs: list[Process]) -> None:
        """MariaDB and slurmdbd (`devcluster up --accounting`), before slurmctld."""
        if self.spec.accounting:
            from slurm_plugin.devcluster.accounting import Accounting
            from slurm_plugin.devcluster.files import slurm_user

            Accounting(self.spec, slurm_user()).start(running, procs, self.registry.save)

    def _start_slurmctld(self, running: dict[tuple[str, str], Process], procs: list[Process]) -> None:
        if ("slurmctld", "slurmctld") in running:
            return
        s = self.spec
        pidfile = s.run / "slurmctld.pid"
        pidfile.unlink(missing_ok=True)
        check_started(subprocess.run(["/usr/sbin/slurmctld", "-f", str(s.slurm_conf)], capture_output=True, text=True), "slurmctld")
        procs.append(Process("slurmctld", "slurmctld", started_pid(pidfile, self._marker, "slurmctld", s.log), self._marker, str(pidfile)))
        self.registry.save(procs)

    def _start_slurmds(self, running: dict[tuple[str, str], Process], procs: list[Process]) -> None:
        s = self.spec
        for node in s.node_names:
            if ("slurmd", node) in running:
                continue
            pidfile = self._seen_here(node, s.run / f"slurmd-{node}.pid")
            pidfile.unlink(missing_ok=True)
            # on its own host slurmd finds its NodeName from the host's name, as on a real node
            argv = [*self._on(node), "/usr/sbin/slurmd", "-f", str(s.slurm_conf), *([] if self.hosts else ["-N", node])]
            check_started(subprocess.run(argv, capture_output=True, text=True), f"slurmd {node}")
            pid = started_pid(pidfile, self._marker, f"slurmd {node}", s.log)
            procs.append(Process("slurmd", node, pid, self._marker, str(pidfile), host=node if self.hosts else ""))
            self.registry.save(procs)

    def _start_gpupack(self, running: dict[tuple[str, str], Process], procs: list[Process]) -> None:
        """The helper, the node-side daemons (agents) and the web view."""
        toml = str(self.spec.gpupack_toml)
        wanted = [("helper", "helper", ["helper", "--config", toml]), *node_side_processes(self.spec),
                  ("web", "web", ["web", "--config", toml])]
        for role, name, args in wanted:
            if (role, name) not in running:
                procs.append(self._spawn(role, name, args))
                self.registry.save(procs)

    @property
    def _marker(self) -> str:
        """What the command line of each process the cluster starts holds: its state folder."""
        return str(self.spec.state_dir)

    def _spawn(self, role: str, name: str, args: list[str]) -> Process:
        """Start a gpupack daemon; an agent on its node's host (nsenter execs, so the pid is the agent's)."""
        node = name if role == "agent" and self.hosts else ""
        logfile = open(self.spec.log / f"{name}.log", "ab")
        proc = subprocess.Popen(
            [*self._on(node), sys.executable, "-m", "slurm_plugin", *args],
            stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env(), "PYTHONPATH": daemon_pythonpath()}, start_new_session=True,
        )
        return Process(role, name, proc.pid, self._marker, host=node)

    # -- ready ---------------------------------------------------------------------------
    def _wait_ready(self) -> None:
        deadline = time.time() + READY_TIMEOUT_S
        last = ""
        while time.time() < deadline:
            last, pause = self._not_ready()
            if not last:
                return
            time.sleep(pause)
        note = forward_filter_note(self.spec.network.bridge) if self.hosts else ""
        raise DevClusterError(f"the cluster did not become ready in {READY_TIMEOUT_S}s ({last}); logs: {self.spec.log}"
                              + (f"\n{note}" if note else ""))

    def _not_ready(self) -> tuple[str, float]:
        """What the cluster still waits for ("" when ready) and how long to wait before
        asking again. Resumes drained or down nodes; raises when the helper or the web view
        exited at start."""
        states = self.health.node_states()
        if not (states and all(node_usable(st) for st in states.values()) and len(states) == self.spec.nodes):
            for node, st in states.items():
                if "DRAIN" in st or "DOWN" in st:
                    self._slurm("scontrol", "update", f"nodename={node}", "state=resume")
            return f"node states {states}", 0.5
        if not (self.health.helper_ok() and self.health.view_fresh()):
            self._raise_if_exited("helper")
            return "the helper does not answer yet, or its watcher has published no cluster view", 0.5
        silent = self._silent_agents()
        if silent:  # a started agent takes seconds to import and open its GPUs on a loaded machine
            return f"the agents of {', '.join(silent)} do not answer yet", 0.5
        web = self.health.web_url()
        if web is None or web_ok(web)[0]:
            return "", 0.0
        self._raise_if_exited("web")
        return f"the web view does not answer at {web} yet", 0.2

    def _silent_agents(self) -> list[str]:
        """The nodes whose agent does not answer a ping on its socket (as the SPANK plugin asks it)."""
        from slurm_plugin.agent.client import AgentUnavailable, ask

        silent = []
        for node in self.spec.node_names:
            sock = self._seen_here(node, self.spec.run / f"agent-{node}.sock")
            try:
                ok = ask(sock, {"op": "ping"}, timeout=1.0).get("status") == "ok"
            except (AgentUnavailable, ValueError):
                ok = False
            if not ok:
                silent.append(node)
        return silent

    def _raise_if_exited(self, role: str) -> None:
        """Raise with the end of its log when the process of ``role`` has exited."""
        proc = next((p for p in self._load() if p.role == role), None)
        if proc and proc.live_pid() is None:
            tail = (self.spec.log / f"{role}.log").read_text(errors="replace")[-1500:]
            what = "the web view" if role == "web" else f"the {role}"
            raise DevClusterError(f"{what} exited at start; its log ends with:\n{tail}")

    # -- down ----------------------------------------------------------------------------
    def down(self, keep: tuple[str, ...] = ()) -> list[str]:
        """Stop the processes `up` started (except roles in `keep`), then, with the nodes'
        hosts, their network (bridge, veths, netns names); returns what was stopped."""
        stopped, kept = [], []
        procs = self._load()
        hosts = self.hosts or (NodeHosts(self.spec) if any(p.role == "host" for p in procs) else None)
        for p in sorted(procs, key=lambda p: STOP_ORDER.get(p.role, 0)):
            if p.role in keep:
                kept.append(p)
                continue
            pid = p.live_pid()
            if pid is not None:
                terminate(pid, p.marker)
                stopped.append(f"{p.role}:{p.name}")
        self.registry.save(kept)
        if not keep:  # a daemon re-executed where its pid file did not follow, a job's script
            stopped += self._stop_strays()
        if hosts and "host" not in keep:
            stopped += hosts.remove_network()
        return stopped

    def _stop_strays(self) -> list[str]:
        """Stop what still runs from the cluster's state folder once its processes are stopped
        (seen: a bench's `scontrol reconfigure` just before its teardown left the re-executed
        slurmctld and the running jobs' steps alive); said, since none should be left."""
        strays = holding(self._marker)
        if strays:
            log.warning("still running from %s after its processes stopped: pids %s; stopping them",
                        self.spec.state_dir, " ".join(map(str, strays)))
        for pid in strays:
            if alive_with(pid, self._marker):  # still the same process (a pid may be reused since)
                terminate(pid, self._marker)
        return [f"stray:{pid}" for pid in strays]


def build_node_side(spec: ClusterSpec) -> None:
    """Build what the nodes need (the SPANK plugin)."""
    node_side.build(spec)


def node_side_processes(spec: ClusterSpec) -> list[tuple[str, str, list[str]]]:
    """(role, name, gpupack arguments) of each node-side daemon to run (the node agents)."""
    return node_side.processes(spec)
