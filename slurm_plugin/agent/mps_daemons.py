"""The MPS control daemons of a node: one per GPU (or MIG instance) that has MPS shares.

A thin adapter over ``nvidia-cuda-mps-control`` (gpupack.toml ``[agent] mps_control``; on
the dev cluster the stand-in :mod:`gpus.sim.mps_control`), as NVIDIA's MPS documentation
describes it:

- start: ``nvidia-cuda-mps-control -d`` with ``CUDA_VISIBLE_DEVICES`` the device's UUID (a
  ``GPU-…`` or a ``MIG-…``) and ``CUDA_MPS_PIPE_DIRECTORY`` / ``CUDA_MPS_LOG_DIRECTORY`` its
  own folders, so each daemon serves that one device, seen as device 0;
- limits, in the daemon rather than only in the clients' environment (which a user can
  change): ``set_default_active_thread_percentage`` and ``set_default_device_pinned_mem_limit
  0 <N>M`` for servers started later, and ``set_active_thread_percentage <pid> <pct>`` and
  ``set_device_pinned_mem_limit <pid> 0 <N>M`` on each running server (``get_server_list``);
  each value is read back. Thread percentages need Volta MPS (CUDA 9+); pinned memory limits
  CUDA 11.5+. A client's own environment can only lower what the daemon sets;
- the server up front: ``start_server -uid <uid>`` for the jobs' user once the limits are
  set, so the server holds the device's one context (exclusive-process compute mode) before
  any of the jobs' processes runs: a process that bypasses MPS is the one refused, never the
  MPS clients; the server is waited for in ``get_server_list``;
- watch: a daemon whose pid (``nvidia-cuda-mps-control.pid`` in its pipe folder) is gone is
  started again, its limits set again, and the restart is counted and logged;
- stop: ``echo quit | nvidia-cuda-mps-control`` when the device's last MPS share ends.
"""
from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurm_plugin.agent.paths import AgentError

log = logging.getLogger(__name__)

DEFAULT_CONTROL = "nvidia-cuda-mps-control"
PID_FILE = "nvidia-cuda-mps-control.pid"
WAIT_S = 10.0
_SIZE = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class MpsLimits:
    """What every client of one daemon may use at most: its thread percentage and pinned
    device memory (the largest share among the device's MPS jobs; each job's own
    environment lowers it to its share)."""

    active_thread_pct: int
    pinned_mib: int


@dataclass
class MpsDaemon:
    key: str  # "gpu0", or "gpu0-gi3" for a MIG instance
    device_uuid: str
    pipe: Path
    logs: Path
    limits: MpsLimits | None = None
    server_uid: int | None = None  # the user whose server was started up front
    restarts: int = 0
    notes: list[str] = field(default_factory=list)


def control_command(text: str | Sequence[str] | None) -> list[str]:
    """The control program as a command line (a string is split as a shell would)."""
    if text is None:
        text = DEFAULT_CONTROL
    words = shlex.split(text) if isinstance(text, str) else list(text)
    if not words:
        raise ValueError("[agent] mps_control is empty: name the nvidia-cuda-mps-control program")
    return words


def size_bytes(text: str) -> int | None:
    """``2G``, ``2048M``, ``2147483648`` -> bytes; None when it is not a size."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)B?\s*", text.upper())
    return int(m.group(1)) * _SIZE[m.group(2)] if m else None


class MpsDaemons:
    """The node's control daemons, under ``root/<key>/pipe`` and ``root/<key>/log``."""

    def __init__(self, root: Path, control: Sequence[str] | str | None = None, timeout_s: float = WAIT_S,
                 env: dict[str, str] | None = None):
        self.root = Path(root)
        self.env = dict(env or {})  # more for the daemon's environment (the simulated GPU's place)
        self.control = control_command(control)
        self.timeout_s = timeout_s
        self.daemons: dict[str, MpsDaemon] = {}

    def dirs(self, key: str) -> tuple[Path, Path]:
        return self.root / key / "pipe", self.root / key / "log"

    def pid(self, key: str) -> int | None:
        """The running daemon's pid for ``key`` (None when none runs)."""
        try:
            pid = int((self.dirs(key)[0] / PID_FILE).read_text().strip())
            os.kill(pid, 0)
        except PermissionError:
            return pid
        except (OSError, ValueError):
            return None
        return pid

    # -- start, limits, stop --------------------------------------------------------------
    def ensure(self, key: str, device_uuid: str, limits: MpsLimits, uid: int | None = None) -> MpsDaemon:
        """The daemon of ``key`` running on ``device_uuid`` with ``limits`` set (started when
        none runs) and, for a known ``uid``, that user's server started; AgentError when it
        cannot be started or refuses the limits or the server."""
        d = self.daemons.get(key)
        if d is None or d.device_uuid != device_uuid:
            pipe, logs = self.dirs(key)
            d = self.daemons[key] = MpsDaemon(key, device_uuid, pipe, logs)
        if self.pid(key) is None:
            self._start(d)
            d.limits = d.server_uid = None
        if d.limits != limits:
            self._set_limits(d, limits)
        if uid is not None and d.server_uid != uid:
            self._start_server(d, uid)
        return d

    def _start_server(self, d: MpsDaemon, uid: int) -> None:
        """``start_server -uid``: the user's server (and its context on the device) now, under
        the daemon's default limits, rather than at the first client. A server the daemon
        already runs is the user's (one user's jobs per device; the daemon quits with them),
        e.g. after an agent restart: it is kept."""
        if not self.command(d, "get_server_list").split():
            self.command(d, f"start_server -uid {uid}")
        deadline = time.monotonic() + self.timeout_s
        while not self.command(d, "get_server_list").split():
            if time.monotonic() > deadline:
                raise AgentError(f"the MPS control daemon for {d.key} did not start uid {uid}'s server "
                                 f"within {self.timeout_s:.0f}s (get_server_list is empty); see {d.logs}")
            time.sleep(0.1)
        d.server_uid = uid
        log.info("MPS daemon %s: server of uid %d started up front", d.key, uid)

    def _env(self, d: MpsDaemon) -> dict[str, str]:
        return {**os.environ, **self.env, "CUDA_VISIBLE_DEVICES": d.device_uuid,
                "CUDA_MPS_PIPE_DIRECTORY": str(d.pipe), "CUDA_MPS_LOG_DIRECTORY": str(d.logs)}

    def _start(self, d: MpsDaemon) -> None:
        for folder in (d.pipe, d.logs):
            folder.mkdir(parents=True, exist_ok=True)
        out = self._run(d, ["-d"], None)
        deadline = time.monotonic() + self.timeout_s
        while self.pid(d.key) is None:
            if time.monotonic() > deadline:
                raise AgentError(f"the MPS control daemon for {d.key} ({d.device_uuid}) did not start "
                                 f"({shlex.join(self.control)} -d said {out!r}); see {d.logs}/control.log")
            time.sleep(0.05)
        log.info("MPS control daemon for %s (%s) started, pid %s", d.key, d.device_uuid, self.pid(d.key))

    def _set_limits(self, d: MpsDaemon, limits: MpsLimits) -> None:
        """The defaults, then each running server's limits; one run of the control program
        when no server runs yet (the isolation waits on it: the SPANK plugin's timeout)."""
        pct, mem = str(limits.active_thread_pct), f"{limits.pinned_mib}M"
        defaults = [f"set_default_active_thread_percentage {pct}", f"set_default_device_pinned_mem_limit 0 {mem}"]
        readback = ["get_default_active_thread_percentage", "get_default_device_pinned_mem_limit 0"]
        out = self.command(d, *defaults, "get_server_list", *readback).split()
        servers = out[:-2]
        if servers:
            lines = [line for s in servers for line in (f"set_active_thread_percentage {s} {pct}",
                                                        f"set_device_pinned_mem_limit {s} 0 {mem}")]
            out = self.command(d, *lines, *readback).split()
        got_pct, got_mem = (out[-2], size_bytes(out[-1])) if len(out) >= 2 else ("", None)
        if got_pct.split(".")[0] != pct or got_mem != limits.pinned_mib << 20:
            raise AgentError(f"the MPS control daemon for {d.key} kept thread percentage {got_pct!r} and "
                             f"pinned memory {got_mem} bytes, not {pct} and {mem}")
        d.limits = limits
        log.info("MPS daemon %s: active thread percentage %s%%, pinned device memory %s per client "
                 "(servers %s)", d.key, pct, mem, servers or "none yet")

    def command(self, d: MpsDaemon, *lines: str) -> str:
        """Commands to the daemon through the control program (one run); its answers."""
        return self._run(d, [], "".join(f"{line}\n" for line in lines))

    def _run(self, d: MpsDaemon, args: list[str], stdin: str | None) -> str:
        try:
            done = subprocess.run([*self.control, *args], input=stdin, env=self._env(d), capture_output=True,
                                  text=True, timeout=self.timeout_s)
        except FileNotFoundError as exc:
            raise AgentError(f"no MPS control program {self.control[0]!r} on this node: install the NVIDIA "
                             f"driver's nvidia-cuda-mps-control or set gpupack.toml [agent] mps_control") from exc
        except subprocess.TimeoutExpired as exc:
            raise AgentError(f"the MPS control program did not answer {stdin or args!r} for {d.key} "
                             f"within {self.timeout_s:.0f}s") from exc
        if done.returncode != 0:
            raise AgentError(f"MPS control for {d.key} refused {(stdin or ' '.join(args)).strip()!r}: "
                             f"{(done.stderr or done.stdout).strip()}")
        return done.stdout

    def stop(self, key: str) -> None:
        """``quit`` to the daemon of ``key``; it is forgotten once its pid is gone."""
        d = self.daemons.pop(key, None)
        if self.pid(key) is None:
            return
        d = d or MpsDaemon(key, "", *self.dirs(key))
        try:
            self.command(d, "quit")
        except AgentError as exc:
            log.warning("MPS control daemon %s: %s", key, exc)
        deadline = time.monotonic() + self.timeout_s
        while self.pid(key) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.pid(key) is not None:
            log.warning("MPS control daemon %s (pid %s) still runs %.0fs after quit", key, self.pid(key),
                        self.timeout_s)
        else:
            log.info("MPS control daemon %s stopped", key)

    # -- watch ------------------------------------------------------------------------------
    def watch(self) -> list[str]:
        """Start again every daemon that died, with its limits; what was done."""
        done = []
        for d in list(self.daemons.values()):
            if self.pid(d.key) is not None:
                continue
            limits, uid, d.restarts = d.limits, d.server_uid, d.restarts + 1
            log.warning("MPS control daemon %s (%s) is gone; starting it again (restart %d)",
                        d.key, d.device_uuid, d.restarts)
            try:
                self._start(d)
                d.limits = d.server_uid = None
                if limits is not None:
                    self._set_limits(d, limits)
                if uid is not None:
                    self._start_server(d, uid)
            except AgentError as exc:
                d.notes.append(str(exc))
                log.error("MPS control daemon %s could not be started again: %s", d.key, exc)
                done.append(f"MPS daemon {d.key} died and did not start again: {exc}")
                continue
            done.append(f"MPS daemon {d.key} died; started again with its limits")
        return done

    def running_keys(self) -> list[str]:
        """Every key under the root whose daemon runs (also ones an earlier agent started)."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and self.pid(p.name) is not None)
