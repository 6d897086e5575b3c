"""Bring the dev cluster up and down, and say how it is.

Every process it starts is written to run/processes.json with its role and pid; `down`
stops exactly those (after checking that the pid still runs our command line), and `up`
starts only what is not already running, so both are idempotent.
"""
from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from slurm_plugin.devcluster import spec as specmod
from slurm_plugin.devcluster.spec import ClusterSpec

log = logging.getLogger(__name__)

APT_PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge", "libslurm-dev", "lua-socket", "liblua5.1-0", "gcc", "make", "libc6-dev"]
REQUIRED_FILES = {
    "slurmctld": "/usr/sbin/slurmctld",
    "slurmd": "/usr/sbin/slurmd",
    "slurm-client": "/usr/bin/sbatch",
    "munge": "/usr/sbin/munged",
    "libslurm-dev": "/usr/include/slurm/spank.h",
    "lua-socket": "/usr/share/lua/5.1/socket.lua",
    "gcc": "/usr/bin/gcc",
    "make": "/usr/bin/make",
}
READY_TIMEOUT_S = 60


class DevClusterError(RuntimeError):
    """The dev cluster cannot be brought up; the message says what to do."""


@dataclass
class Process:
    role: str  # munged | slurmctld | slurmd | helper | agent | web
    name: str
    pid: int
    marker: str  # a string our command line contains (the state dir)
    pidfile: str = ""  # where a Slurm daemon writes its pid (it changes when 23.11+ re-executes)

    def live_pid(self) -> int | None:
        """The pid running now: the recorded one, or the one the daemon wrote after re-executing.

        Since Slurm 23.11 `scontrol reconfigure` makes slurmctld and slurmd start a new
        process of themselves and the old one exits; the new one writes the same pid file.
        Either way the command line must still hold our state folder."""
        if _alive_with(self.pid, self.marker):
            return self.pid
        if self.pidfile:
            try:
                pid = int(Path(self.pidfile).read_text().strip() or "0")
            except (OSError, ValueError):
                return None
            if pid and _alive_with(pid, self.marker):
                return pid
        return None


@dataclass
class ProcessStatus:
    role: str
    name: str
    pid: int
    alive: bool
    healthy: bool
    detail: str
    metrics_url: str = ""  # its Prometheus endpoint ("" for Slurm's and munge's daemons)
    url: str | None = None  # where a role that serves HTTP answers (the web view)


def _alive_with(pid: int, marker: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return False
    return marker in cmdline


def _started_pid(pidfile: Path, marker: str, what: str, logs: Path, timeout: float = 10.0) -> int:
    """The pid a daemon wrote, once it has written it and is still alive a moment later."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            pid = int(pidfile.read_text().strip() or "0")
        except (OSError, ValueError):
            pid = 0
        if pid and _alive_with(pid, marker):
            time.sleep(0.3)  # a daemon that cannot bind its port exits right after forking
            if _alive_with(pid, marker):
                return pid
        time.sleep(0.05)
    raise DevClusterError(
        f"{what} did not start (no live pid in {pidfile} after {timeout:.0f}s); "
        f"see its log in {logs} (a port already in use? try --port or GPUPACK_DEVCLUSTER_PORT)"
    )


class DevCluster:
    def __init__(self, spec: ClusterSpec):
        self.spec = spec
        self.registry_path = spec.run / "processes.json"

    # -- registry ------------------------------------------------------------------------
    def _load(self) -> list[Process]:
        try:
            return [Process(**p) for p in json.loads(self.registry_path.read_text())]
        except (OSError, ValueError, TypeError):
            return []

    def _save(self, processes: list[Process]) -> None:
        self.registry_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.registry_path.with_suffix(".tmp")
        tmp.write_text(json.dumps([asdict(p) for p in processes], indent=1))
        tmp.replace(self.registry_path)

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.spec.slurm_conf), "GPUPACK_CONFIG": str(self.spec.gpupack_toml)}

    def _slurm(self, *args: str, timeout: float = 15.0) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(args), env={**os.environ, **self.env()}, capture_output=True, text=True, timeout=timeout
        )

    # -- install -------------------------------------------------------------------------
    @staticmethod
    def missing_packages() -> list[str]:
        return [pkg for pkg, path in REQUIRED_FILES.items() if not Path(path).exists()]

    def install_packages(self) -> None:
        missing = self.missing_packages()
        if not missing:
            return
        if os.geteuid() != 0:
            raise DevClusterError(
                f"missing Debian packages {missing}; run as root, or `apt-get install {' '.join(missing)}`"
            )
        log.warning("installing %s from Debian's packages", " ".join(missing))
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
        result = subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *APT_PACKAGES],
            env=env, capture_output=True, text=True,
        )
        if result.returncode != 0:
            raise DevClusterError(f"apt-get install failed:\n{result.stderr[-2000:]}")

    # -- files ---------------------------------------------------------------------------
    def _shares_and_memory(self) -> tuple[int, float]:
        from mig.catalog import load_catalog

        cat = load_catalog(self.spec.gpu_model)
        return cat.memory_slices, cat.memory_mib / 1024

    def write_files(self) -> bool:
        """Write every config; True when slurm.conf or gres.conf changed (daemons must restart)."""
        s = self.spec
        slurm_user = "slurm" if _user_exists("slurm") else "root"
        spools = [s.state_dir / "spool" / node for node in s.node_names]  # slurmd 23.11+ does not make it
        for d in (s.etc, s.run, s.log, s.state_dir / "ctld", s.run / "munge", s.simgpu_dir, *spools):
            d.mkdir(parents=True, exist_ok=True)
        os.chmod(s.state_dir, 0o755)
        for d in (s.state_dir / "ctld", s.log):
            shutil.chown(d, slurm_user, slurm_user)
        os.chmod(s.log, 0o777)
        shutil.chown(s.run / "munge", "munge", "munge")
        os.chmod(s.simgpu_dir, 0o777)
        shares, mem_gib = self._shares_and_memory()
        epilog = s.etc / "epilog.sh"
        _write(epilog, _epilog_script(s), mode=0o755)
        changed = _write(
            s.slurm_conf, specmod.slurm_conf(s, socket.gethostname(), slurm_user, epilog, shares)
        )
        changed |= _write(s.etc / "gres.conf", specmod.gres_conf(s, shares))
        changed |= _write(s.etc / "cgroup.conf", specmod.cgroup_conf(slurm_release()))
        changed |= _write(s.etc / "plugstack.conf", plugstack_conf(s))
        lua = resources.files("slurm_plugin").joinpath("job_submit.lua").read_text()
        _write(s.etc / "job_submit.lua", lua)
        _write(s.etc / "gpupack_shim.conf", specmod.shim_conf(s))
        _write(s.gpupack_toml, specmod.gpupack_toml(s, shares, mem_gib))
        key = s.etc / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        shutil.chown(key, "munge", "munge")
        os.chmod(key, 0o600)
        for node in s.node_names:
            dev = s.device_dir(node)
            dev.mkdir(parents=True, exist_ok=True)
            for g in range(s.gpus_per_node):
                path = dev / f"nvidia{g}"
                if not path.exists():
                    # a character device like the real /dev/nvidiaN (major 195), never opened
                    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(195, g))
        return changed

    # -- processes -----------------------------------------------------------------------
    def _running(self) -> dict[tuple[str, str], Process]:
        running = {}
        for p in self._load():
            pid = p.live_pid()
            if pid is not None:
                p.pid = pid
                running[(p.role, p.name)] = p
        return running

    def up(self) -> list[ProcessStatus]:
        if os.geteuid() != 0:
            raise DevClusterError("the dev cluster needs root (munged, slurmd and fake device files)")
        self.install_packages()
        build_node_side(self.spec)  # before the configs: plugstack.conf names what it built
        config_changed = self.write_files()
        running = self._running()
        marker = str(self.spec.state_dir)
        s = self.spec
        if config_changed and running:
            log.warning("the cluster's configuration changed: restarting its daemons")
            self.down(keep=("munged",))
            running = self._running()
        procs = list(running.values())

        if ("munged", "munged") not in running:
            pidfile = s.run / "munge" / "munged.pid"
            pidfile.unlink(missing_ok=True)
            _check(subprocess.run(
                ["runuser", "-u", "munge", "--", "/usr/sbin/munged", f"--socket={s.munge_socket}",
                 f"--key-file={s.etc / 'munge.key'}", f"--pid-file={pidfile}",
                 f"--log-file={s.run / 'munge' / 'munged.log'}", f"--seed-file={s.run / 'munge' / 'seed'}"],
                capture_output=True, text=True), "munged")
            procs.append(Process("munged", "munged", _started_pid(pidfile, marker, "munged", s.run / "munge"), marker))
            self._save(procs)
        if ("slurmctld", "slurmctld") not in running:
            pidfile = s.run / "slurmctld.pid"
            pidfile.unlink(missing_ok=True)
            _check(subprocess.run(["/usr/sbin/slurmctld", "-f", str(s.slurm_conf)], capture_output=True, text=True), "slurmctld")
            procs.append(Process("slurmctld", "slurmctld", _started_pid(pidfile, marker, "slurmctld", s.log), marker, str(pidfile)))
            self._save(procs)
        for node in s.node_names:
            if ("slurmd", node) in running:
                continue
            pidfile = s.run / f"slurmd-{node}.pid"
            pidfile.unlink(missing_ok=True)
            _check(subprocess.run(["/usr/sbin/slurmd", "-f", str(s.slurm_conf), "-N", node], capture_output=True, text=True), f"slurmd {node}")
            procs.append(Process("slurmd", node, _started_pid(pidfile, marker, f"slurmd {node}", s.log), marker, str(pidfile)))
            self._save(procs)
        if ("helper", "helper") not in running:
            procs.append(self._spawn("helper", "helper", ["helper", "--config", str(s.gpupack_toml)]))
            self._save(procs)
        for role, name, args in node_side_processes(s):
            if (role, name) not in running:
                procs.append(self._spawn(role, name, args))
                self._save(procs)
        if ("web", "web") not in running:
            procs.append(self._spawn("web", "web", ["web", "--config", str(s.gpupack_toml)]))
            self._save(procs)
        self._wait_ready()
        return self.status()

    def _spawn(self, role: str, name: str, args: list[str]) -> Process:
        logfile = open(self.spec.log / f"{name}.log", "ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "slurm_plugin", *args],
            stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env()}, start_new_session=True,
        )
        return Process(role, name, proc.pid, str(self.spec.state_dir))

    def _wait_ready(self) -> None:
        deadline = time.time() + READY_TIMEOUT_S
        last = ""
        while time.time() < deadline:
            states = self.node_states()
            if states and all(_node_usable(st) for st in states.values()) and len(states) == self.spec.nodes:
                view = self.spec.helper_socket.parent / "cluster-view.json"
                web = self.web_url()
                if self._helper_ok() and view.exists() and time.time() - view.stat().st_mtime < 30:
                    if web is None or _web_ok(web)[0]:
                        return
                    last = f"the web view does not answer at {web} yet"
                    proc = next((p for p in self._load() if p.role == "web"), None)
                    if proc and proc.live_pid() is None:
                        tail = (self.spec.log / "web.log").read_text(errors="replace")[-1500:]
                        raise DevClusterError(f"the web view exited at start; its log ends with:\n{tail}")
                    time.sleep(0.2)
                    continue
                last = "the helper does not answer yet, or its watcher has published no cluster view"
                helper = next((p for p in self._load() if p.role == "helper"), None)
                if helper and helper.live_pid() is None:
                    tail = (self.spec.log / "helper.log").read_text(errors="replace")[-1500:]
                    raise DevClusterError(f"the helper exited at start; its log ends with:\n{tail}")
            else:
                last = f"node states {states}"
                for node, st in states.items():
                    if "DRAIN" in st or "DOWN" in st:
                        self._slurm("scontrol", "update", f"nodename={node}", "state=resume")
            time.sleep(0.5)
        raise DevClusterError(f"the cluster did not become ready in {READY_TIMEOUT_S}s ({last}); logs: {self.spec.log}")

    def node_states(self) -> dict[str, str]:
        try:
            out = self._slurm("sinfo", "-h", "-N", "-o", "%N %T")
        except (OSError, subprocess.TimeoutExpired):
            return {}
        if out.returncode != 0:
            return {}
        return dict(line.split(None, 1) for line in out.stdout.splitlines() if " " in line)

    def _helper_ok(self) -> bool:
        from slurm_plugin.helper.server import ask

        try:
            return ask(self.spec.helper_socket, {"op": "ping"}, timeout=1.0).get("status") == "ok"
        except OSError:
            return False

    def status(self) -> list[ProcessStatus]:
        out: list[ProcessStatus] = []
        states = self.node_states()
        ctld_ok = None
        for p in self._load():
            pid = p.live_pid()
            alive = pid is not None
            p.pid = pid or p.pid
            healthy, detail = alive, "running" if alive else "not running"
            if alive and p.role == "slurmctld":
                ping = self._slurm("scontrol", "ping")
                ctld_ok = ping.returncode == 0 and "UP" in ping.stdout
                healthy, detail = ctld_ok, ping.stdout.strip() or ping.stderr.strip()
            elif alive and p.role == "slurmd":
                st = states.get(p.name, "unknown")
                healthy, detail = _node_usable(st), f"node state {st}"
            elif alive and p.role == "helper":
                healthy = self._helper_ok()
                detail = "answers on " + str(self.spec.helper_socket) if healthy else "socket does not answer"
                out.append(self._watcher_status(p.pid))
            elif alive and p.role == "web":
                url = self.web_url()
                healthy, detail = _web_ok(url) if url else (False, "no [web] port in the cluster's gpupack.toml")
                out.append(ProcessStatus(p.role, p.name, p.pid, alive, healthy, detail, url=url))
                continue
            elif alive and p.role == "munged":
                healthy = self.spec.munge_socket.exists()
                detail = f"socket {self.spec.munge_socket}"
            out.append(ProcessStatus(p.role, p.name, p.pid, alive, healthy, detail, self.metrics_url(p.role, p.name)))
        return out

    def metrics_url(self, role: str, name: str) -> str:
        """Where a daemon of this cluster serves its metrics: the same rule the daemon follows
        (gpupack.toml [metrics], else a port derived from this cluster's slurm.conf)."""
        from slurm_plugin.metrics.settings import MetricsOverride

        s = self.spec
        if role == "helper":
            return MetricsOverride().submit(s.gpupack_toml, s.slurm_conf).url
        if role == "watcher":
            return MetricsOverride().watch(s.gpupack_toml, s.slurm_conf).url
        if role == "agent":
            return MetricsOverride().agent(s.gpupack_toml, s.slurm_conf, name).url
        return ""

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

    def _watcher_status(self, helper_pid: int) -> ProcessStatus:
        """The helper's watcher process (the helper starts it): alive, and its view fresh?"""
        pid = _child_with(helper_pid, "--role")
        view = self.spec.helper_socket.parent / "cluster-view.json"
        try:
            age = time.time() - view.stat().st_mtime
        except OSError:
            age = None
        fresh = age is not None and age < 30
        detail = f"cluster view {age:.1f} s old" if age is not None else "no cluster view yet"
        return ProcessStatus("watcher", "helper", pid or 0, pid is not None, pid is not None and fresh, detail,
                             self.metrics_url("watcher", "helper"))

    def down(self, keep: tuple[str, ...] = ()) -> list[str]:
        """Stop the processes `up` started (except roles in `keep`); returns what was stopped."""
        procs = self._load()
        order = {"web": 0, "helper": 0, "agent": 0, "slurmd": 1, "slurmctld": 2, "munged": 3}
        stopped, kept = [], []
        for p in sorted(procs, key=lambda p: order.get(p.role, 0)):
            if p.role in keep:
                kept.append(p)
                continue
            pid = p.live_pid()
            if pid is not None:
                _terminate(pid, p.marker)
                stopped.append(f"{p.role}:{p.name}")
        self._save(kept)
        return stopped


def slurm_release() -> tuple[int, int, int]:
    """The installed Slurm release as numbers, e.g. (24, 11, 5), read from libslurm-dev's header."""
    from slurm_plugin.devcluster.roots import installed_release

    text = installed_release(Path("/"))
    if text is None:
        raise DevClusterError("no Slurm installed (slurm/slurm_version.h missing): install libslurm-dev")
    parts = [int(p) for p in text.split("-")[0].split(".")[:3]]
    major, minor, micro = (parts + [0, 0, 0])[:3]
    return major, minor, micro


def _child_with(parent: int, marker: str) -> int | None:
    """The pid of a child of ``parent`` whose command line holds ``marker``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == parent and marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                return int(entry.name)
        except (OSError, ValueError, IndexError):
            continue
    return None


def build_node_side(spec: ClusterSpec) -> None:
    """Build what the nodes need (the SPANK plugin), when the node-side module is present."""
    try:
        from slurm_plugin.devcluster import node_side
    except ImportError:
        return
    node_side.build(spec)


def node_side_processes(spec: ClusterSpec) -> list[tuple[str, str, list[str]]]:
    """(role, name, gpupack arguments) of each node-side daemon to run (the node agents)."""
    try:
        from slurm_plugin.devcluster import node_side
    except ImportError:
        return []
    return node_side.processes(spec)


def plugstack_conf(spec: ClusterSpec) -> str:
    lines = ["# Written by `gpupack devcluster up`."]
    try:
        from slurm_plugin.devcluster import node_side
    except ImportError:
        return "\n".join(lines) + "\n"
    return "\n".join(lines + node_side.plugstack_lines(spec)) + "\n"


def _epilog_script(spec: ClusterSpec) -> str:
    # slurmd runs the Epilog with a bare environment: name where this code lives, so the same
    # checkout answers in a Debian root (where it is not pip-installed) as on the host
    code = Path(__file__).resolve().parents[2]
    return (
        "#!/bin/sh\n"
        "# gpupack dev cluster epilog: record what the job used. It never fails the node.\n"
        f'PYTHONPATH="{code}${{PYTHONPATH:+:$PYTHONPATH}}" "{sys.executable}" -m slurm_plugin epilog '
        f'--config "{spec.gpupack_toml}" >>"{spec.log}/epilog.log" 2>&1 || true\n'
        "exit 0\n"
    )


def _web_ok(url: str) -> tuple[bool, str]:
    """Whether the web view answers its health check (GET /healthz)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url + "healthz", timeout=2.0) as resp:
            return resp.status == 200, f"serves {url}"
    except (OSError, urllib.error.URLError) as exc:
        return False, f"{url} does not answer: {exc}"


def _node_usable(state: str) -> bool:
    s = state.upper()
    return not any(bad in s for bad in ("DOWN", "DRAIN", "FAIL", "UNKNOWN", "NOT_RESPONDING", "*"))


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _write(path: Path, text: str, mode: int = 0o644) -> bool:
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    tmp.replace(path)
    return True


def _check(result: subprocess.CompletedProcess, what: str) -> None:
    if result.returncode != 0:
        raise DevClusterError(f"{what} failed to start (exit {result.returncode}): {result.stderr.strip()[-1500:]}")


def _terminate(pid: int, marker: str, timeout: float = 10.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not _alive_with(pid, marker):
            return
        time.sleep(0.1)
    log.warning("pid %d did not stop on SIGTERM; killing it", pid)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
