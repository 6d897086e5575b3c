"""What the dev cluster started: the registry of its processes (run/processes.json) and
the checks that a pid is still ours, waiting for a daemon's pid, stopping one."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from slurm_plugin.devcluster.errors import DevClusterError

log = logging.getLogger(__name__)

__all__ = ["Process", "ProcessRegistry", "alive_with", "check_started", "child_with", "holding", "started_pid",
           "terminate"]


@dataclass
class Process:
    role: str  # munged | slurmctld | slurmd | helper | agent | web
    name: str
    pid: int
    marker: str  # a string our command line contains (the state dir)
    pidfile: str = ""  # where a Slurm daemon writes its pid (it changes when 23.11+ re-executes)
    host: str = ""  # the node whose host it runs on (multi-host); "" for the controller's host

    def live_pid(self) -> int | None:
        """The pid running now: the recorded one, or the one the daemon wrote after re-executing.

        Since Slurm 23.11 `scontrol reconfigure` makes slurmctld and slurmd start a new
        process of themselves and the old one exits; the new one writes the same pid file.
        Either way the command line must still hold our state folder."""
        if alive_with(self.pid, self.marker):
            return self.pid
        if self.pidfile:
            try:
                pid = pid_in(Path(self.pidfile))
            except (OSError, ValueError):
                return None
            if pid and alive_with(pid, self.marker):
                return pid
        return None


class ProcessRegistry:
    """The processes the cluster started, in a JSON file (written atomically)."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> list[Process]:
        try:
            return [Process(**p) for p in json.loads(self.path.read_text())]
        except (OSError, ValueError, TypeError):
            return []

    def save(self, processes: list[Process]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps([asdict(p) for p in processes], indent=1))
        tmp.replace(self.path)

    def running(self) -> dict[tuple[str, str], Process]:
        """The registered processes still running, by (role, name), with their live pid."""
        running = {}
        for p in self.load():
            pid = p.live_pid()
            if pid is not None:
                p.pid = pid
                running[(p.role, p.name)] = p
        return running


def alive_with(pid: int, marker: str) -> bool:
    """Whether ``pid`` runs and its command line holds ``marker``."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return False
    return marker in cmdline


def holding(marker: str, proc: Path = Path("/proc")) -> list[int]:
    """The processes whose command line names a path inside ``marker`` (a cluster's state
    folder) and that share this process's root: the cluster's daemons, whatever pid a
    re-executing Slurm daemon took, and its jobs' scripts in its spool. Never this process or
    its ancestors (a `gpupack devcluster down --state-dir` names the folder itself), never a
    process of another Debian root (whose own dev cluster may use the same path)."""
    inside = marker.rstrip("/") + "/"
    mine = _ancestors(proc)
    try:
        root = (proc / "self" / "root").stat()
    except OSError:
        return []
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            if inside not in cmdline:
                continue
            theirs = (entry / "root").stat()
        except OSError:
            continue
        if (theirs.st_dev, theirs.st_ino) == (root.st_dev, root.st_ino):
            found.append(int(entry.name))
    return sorted(found)


def _ancestors(proc: Path) -> set[int]:
    """This process and its parents."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            stat = (proc / str(pid) / "stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def pid_in(pidfile: Path) -> int:
    """The pid a daemon wrote (0: none yet): the file's first line. Slurm 24.11, re-executing
    on `scontrol reconfigure`, writes its new pid over the old one without truncating the
    file: "31548\n" became "560\n8\n" once the pid counter had wrapped (a ValueError if
    the first line is no number)."""
    return int(pidfile.read_text().split("\n", 1)[0].strip() or "0")


def started_pid(pidfile: Path, marker: str, what: str, logs: Path, timeout: float = 10.0) -> int:
    """The pid a daemon wrote, once it has written it and is still alive a moment later."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            pid = pid_in(pidfile)
        except (OSError, ValueError):
            pid = 0
        if pid and alive_with(pid, marker):
            time.sleep(0.3)  # a daemon that cannot bind its port exits right after forking
            if alive_with(pid, marker):
                return pid
        time.sleep(0.05)
    raise DevClusterError(
        f"{what} did not start (no live pid in {pidfile} after {timeout:.0f}s); "
        f"see its log in {logs} (a port already in use? try --port or GPUPACK_DEVCLUSTER_PORT)"
    )


def check_started(result: subprocess.CompletedProcess, what: str) -> None:
    """Raise when the command that starts a daemon failed."""
    if result.returncode != 0:
        raise DevClusterError(f"{what} failed to start (exit {result.returncode}): {result.stderr.strip()[-1500:]}")


def child_with(parent: int, marker: str) -> int | None:
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


def terminate(pid: int, marker: str, timeout: float = 10.0) -> None:
    """SIGTERM ``pid``, then SIGKILL if it still runs (with ``marker``) after ``timeout``."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not alive_with(pid, marker):
            return
        time.sleep(0.1)
    log.warning("pid %d did not stop on SIGTERM; killing it", pid)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
