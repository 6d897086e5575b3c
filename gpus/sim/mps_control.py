"""A stand-in for ``nvidia-cuda-mps-control`` on the dev cluster's simulated GPUs.

Run as the real program is (``python3 -m gpus.sim.mps_control`` in its place, gpupack.toml
``[agent] mps_control``):

- ``-d``: start the control daemon in the background; ``-f``: in the foreground. It keeps
  the real daemon's files: ``nvidia-cuda-mps-control.pid`` and the ``control`` socket in
  ``CUDA_MPS_PIPE_DIRECTORY`` (default ``/tmp/nvidia-mps``), ``control.log`` in
  ``CUDA_MPS_LOG_DIRECTORY`` (default ``/var/log/nvidia-mps``), and records its limits and
  servers in ``sim-mps.json`` beside the pid file. A second daemon on one pipe directory is
  refused.
- no option: send each line of standard input to the running daemon and print its answers
  (``echo quit | nvidia-cuda-mps-control``); exit status 1 when the daemon is not running or
  refused a command.

The commands and what is refused: :mod:`gpus.sim.mps_state`. A simulated CUDA process (the
``simgpu`` workload) with ``CUDA_MPS_PIPE_DIRECTORY`` set joins the daemon through
:func:`connect_client`, as the CUDA driver does, and runs under the limits it answers; the
simulated GPU refuses its allocations past the pinned memory limit. Without a daemon it
runs as a plain process, as CUDA does. Each server holds the device's one context on the
simulated GPU (``CUDA_VISIBLE_DEVICES``, the GPU of ``GPUPACK_SIM_DIR``/``GPUPACK_NODE`` in
the daemon's environment; :class:`SimDevice`) from its start to its end.
"""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpus.sim.mps_state import MpsRefused, MpsState, NoDevice, env_limit
from mig.errors import MigError
from store.jsonfile import write_json_atomic

log = logging.getLogger(__name__)

PID_FILE = "nvidia-cuda-mps-control.pid"
SOCKET = "control"
STATE_FILE = "sim-mps.json"
START_WAIT_S = 10.0
STAND_IN = f"{sys.executable} -m gpus.sim.mps_control"  # [agent] mps_control on the dev cluster


def pipe_dir(env: dict[str, str]) -> Path:
    return Path(env.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps")


def log_dir(env: dict[str, str]) -> Path:
    return Path(env.get("CUDA_MPS_LOG_DIRECTORY") or "/var/log/nvidia-mps")


def daemon_pid(pipe: Path) -> int | None:
    """The pid of the daemon that runs on ``pipe`` (None when none does)."""
    try:
        pid = int((pipe / PID_FILE).read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


@contextlib.contextmanager
def socket_address(pipe: Path) -> Iterator[str]:
    """The control socket's address: its path, or, where that path is longer than an AF_UNIX
    address holds (108 bytes), the same file reached through a descriptor of its folder
    (``/proc/self/fd/N/control``), open while the address is in use."""
    path = str(pipe / SOCKET)
    if len(path.encode()) < 100:
        yield path
        return
    fd = os.open(pipe, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{SOCKET}"
    finally:
        os.close(fd)


def ask(pipe: Path, line: str, timeout: float = 5.0) -> tuple[bool, str]:
    """(accepted, answer) of the daemon on ``pipe`` for one command; OSError when none runs."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock, socket_address(pipe) as address:
        sock.settimeout(timeout)
        sock.connect(address)
        sock.sendall(line.strip().encode() + b"\n")
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    text = data.decode(errors="replace")
    status, _, answer = text.partition("\n")
    return status == "OK", answer.rstrip("\n")


@dataclass(frozen=True)
class ClientLimits:
    """What an MPS client runs under: its server, thread percentage and pinned memory limit
    (None: none), the daemon's lowered by the client's own environment, never raised."""

    server: int
    active_thread_pct: int
    pinned_bytes: int | None


def connect_client(env: dict[str, str], uid: int, pid: int) -> ClientLimits | None:
    """The simulated CUDA driver's MPS handshake: None when no daemon answers on the client's
    pipe directory (the process then runs without MPS); MpsRefused when the daemon refuses."""
    try:
        ok, answer = ask(pipe_dir(env), f"sim_connect_client {uid} {pid}")
    except OSError:
        return None
    if not ok:
        raise MpsRefused(answer)
    server, pct, pinned = (int(w) for w in answer.split())
    own_pct = env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "")
    if own_pct.isdigit() and 1 <= int(own_pct) < pct:
        pct = int(own_pct)
    own = env_limit(env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"))
    limits = [b for b in (pinned or None, own) if b]
    return ClientLimits(server, pct, min(limits) if limits else None)


def client_exit(env: dict[str, str], pid: int) -> None:
    try:
        ask(pipe_dir(env), f"sim_client_exit {pid}")
    except OSError:
        pass


# -- the daemon ------------------------------------------------------------------------------
class SimDevice:
    """The simulated device a daemon serves: each server's one context on it, as the real
    server's (:meth:`gpus.sim.compute_mode.SimComputeMode.open_mps_server`)."""

    def __init__(self, sim_dir: str, node: str, device_uuid: str):
        from gpus.sim.backend import SimGpuBackend

        self.gpu, self.device = SimGpuBackend(Path(sim_dir), node), device_uuid

    @classmethod
    def from_env(cls, env: dict[str, str]) -> SimDevice | NoDevice:
        """The daemon's device; NoDevice when its environment names no simulated GPU."""
        where = [env.get(k, "") for k in ("GPUPACK_SIM_DIR", "GPUPACK_NODE", "CUDA_VISIBLE_DEVICES")]
        return cls(*where) if all(where) else NoDevice()

    def open(self, server: int, uid: int) -> None:
        try:
            self.gpu.open_mps_server(self.device, server, os.getpid())
        except MigError as exc:
            raise MpsRefused(f"the MPS server for uid {uid} cannot make its context: {exc}") from exc

    def close(self, server: int) -> None:
        try:
            self.gpu.close_mps_server(self.device, server)
        except MigError as exc:  # the device is gone (its MIG instance destroyed)
            log.info("MPS server %s: its device %s is gone (%s)", server, self.device, exc)


class _Daemon(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, pipe: Path, logs: Path, env: dict[str, str]):
        self.pipe, self.logs = pipe, logs
        self.state = MpsState(contexts=SimDevice.from_env(env))
        self.lock = threading.Lock()
        with socket_address(pipe) as address:  # bound once: the folder's descriptor can close after
            super().__init__(address, _Handler)

    def note(self, text: str) -> None:
        with open(self.logs / "control.log", "a", encoding="utf-8") as fh:
            fh.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {text}\n")

    def run_command(self, line: str) -> tuple[bool, str]:
        with self.lock:
            try:
                answer = self.state.answer(line, alive=_alive)
                ok = True
            except MpsRefused as exc:
                ok, answer = False, str(exc)
            write_json_atomic(self.pipe / STATE_FILE, {"pid": os.getpid(), **self.state.to_dict()}, mode=0o644)
        self.note(f"{line.strip()} -> {'' if ok else 'refused: '}{answer}")
        if self.state.quitting:
            threading.Thread(target=self.shutdown, daemon=True).start()
        return ok, answer


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        line = self.rfile.readline().decode(errors="replace")
        ok, answer = self.server.run_command(line)  # type: ignore[attr-defined]
        self.wfile.write(f"{'OK' if ok else 'ERR'}\n{answer}\n".encode())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def serve(env: dict[str, str]) -> int:
    """The daemon in the foreground (``-f``), until ``quit``."""
    pipe, logs = pipe_dir(env), log_dir(env)
    if daemon_pid(pipe) is not None:
        print("An instance of this daemon is already running", file=sys.stderr)
        return 1
    pipe.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    (pipe / SOCKET).unlink(missing_ok=True)
    server = _Daemon(pipe, logs, env)
    os.chmod(pipe / SOCKET, 0o777)  # every user's CUDA processes reach the daemon, as with the real one
    (pipe / PID_FILE).write_text(f"{os.getpid()}\n")
    server.note(f"Control daemon started, pid {os.getpid()}, CUDA_VISIBLE_DEVICES="
                f"{env.get('CUDA_VISIBLE_DEVICES', '')}")
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        for s in server.state.servers:
            server.state.contexts.close(s.pid)
        server.server_close()
        (pipe / SOCKET).unlink(missing_ok=True)
        (pipe / PID_FILE).unlink(missing_ok=True)
        server.note("Control daemon exited")
    return 0


def start_background(env: dict[str, str]) -> int:
    """``-d``: the daemon forked into its own session, as the real one does; returns once it
    answers."""
    pipe = pipe_dir(env)
    if daemon_pid(pipe) is not None:
        print("An instance of this daemon is already running", file=sys.stderr)
        return 1
    child = os.fork()
    if child == 0:  # the daemon: its own session, no terminal, until quit
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        status = 1
        try:
            status = serve(env)
        finally:
            os._exit(status)
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        if daemon_pid(pipe) == child and (pipe / SOCKET).exists():
            return 0
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            print(f"the control daemon exited at start (status {status >> 8})", file=sys.stderr)
            return 1
        time.sleep(0.02)
    print(f"the control daemon did not answer on {pipe} within {START_WAIT_S:.0f}s", file=sys.stderr)
    return 1


def send_commands(env: dict[str, str], lines) -> int:
    """No option: each line of standard input to the daemon; its answers on standard output."""
    status = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            ok, answer = ask(pipe_dir(env), line)
        except OSError:
            print("Cannot find MPS control daemon process", file=sys.stderr)
            return 1
        if answer:
            print(answer, file=sys.stdout if ok else sys.stderr)
        status = status if ok else 1
    return status


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    env = dict(os.environ)
    if args == ["-d"]:
        return start_background(env)
    if args == ["-f"]:
        return serve(env)
    if args:
        print("usage: nvidia-cuda-mps-control [-d | -f]  (the dev cluster's stand-in)", file=sys.stderr)
        return 2
    return send_commands(env, sys.stdin)


if __name__ == "__main__":
    sys.exit(main())
