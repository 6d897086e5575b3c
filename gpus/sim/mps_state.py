"""What the stand-in MPS control daemon knows, and its answer to each command (pure, no I/O).

The commands are those of ``nvidia-cuda-mps-control`` (NVIDIA's MPS documentation, "Tools
and Interface Reference"): ``get_server_list``, ``start_server -uid U``, ``get_client_list
PID``, ``set_default_active_thread_percentage P`` (Volta and later: affects servers started
after it), ``set_active_thread_percentage PID P`` (a running server), their ``get_``
forms, ``set_default_device_pinned_mem_limit DEV VALUE`` and ``set_device_pinned_mem_limit
PID DEV VALUE`` (CUDA 11.5 and later) with their ``get_`` forms, ``terminate_client``, and
``quit``. Two more are the simulated CUDA driver's own handshake (the real client library
talks to the daemon over its private protocol): ``sim_connect_client UID PID`` and
``sim_client_exit PID``.

What it refuses, as the real daemon does: a server for a second user while the first
user's server has clients (the real daemon queues that user until the clients are done; the
stand-in answers with an error so a test sees it at once), a percentage outside 1-100, a
limit it cannot read, a server id it does not run, a server whose device a process outside
MPS holds (its context refused: the device's compute mode). The stand-in starts no server
process: a server is a record with an id from its own counter, whose context on the device
``contexts`` opens when it starts (``start_server -uid`` or a first client) and closes when it
ends.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Protocol

SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
FIRST_SERVER_ID = 4_000_001  # server ids of the stand-in (no process has them)


class MpsRefused(ValueError):
    """A command the control daemon refuses; the message is its answer."""


def parse_limit(text: str) -> int:
    """``2G``, ``500M``, ``1048576`` -> bytes (the control program's value format)."""
    m = re.fullmatch(r"(\d+)([KMGT]?)B?", text.strip().upper())
    if not m or int(m.group(1)) <= 0:
        raise MpsRefused(f"Invalid memory limit {text!r}: write a positive size like 2G or 500M")
    return int(m.group(1)) * SIZE_UNITS[m.group(2)]


def env_limit(text: str | None, device: int = 0) -> int | None:
    """A client's ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (``"0=2G,1=4G"`` or ``"2G"``) for one
    device; None when it names none or cannot be read (the daemon's limit then holds)."""
    for part in (text or "").split(","):
        dev, sep, value = part.strip().rpartition("=")
        if sep and dev.strip() != str(device):
            continue
        try:
            return parse_limit(value)
        except MpsRefused:
            return None
    return None


class ServerContexts(Protocol):
    """The device the daemon serves: a server's context opened (MpsRefused when the device
    refuses it) and closed."""

    def open(self, server: int, uid: int) -> None: ...

    def close(self, server: int) -> None: ...


class NoDevice:
    """No device to hold (the state alone, as in unit tests of the commands)."""

    def open(self, server: int, uid: int) -> None:
        return None

    def close(self, server: int) -> None:
        return None


@dataclass
class Server:
    pid: int
    uid: int
    active_thread_pct: int
    pinned: dict[str, int]  # device -> bytes per client
    clients: list[int] = field(default_factory=list)


@dataclass
class MpsState:
    """The daemon's defaults and its servers; ``answer`` runs one command."""

    default_pct: int = 100
    default_pinned: dict[str, int] = field(default_factory=dict)
    servers: list[Server] = field(default_factory=list)
    next_id: int = FIRST_SERVER_ID
    quitting: bool = False
    contexts: ServerContexts = field(default_factory=NoDevice, repr=False, compare=False)

    def to_dict(self) -> dict:
        return {"default_pct": self.default_pct, "default_pinned": dict(self.default_pinned),
                "servers": [asdict(s) for s in self.servers], "next_id": self.next_id,
                "quitting": self.quitting}

    # -- commands ---------------------------------------------------------------------
    def answer(self, line: str, alive=lambda pid: True) -> str:
        """The daemon's reply to one command line (empty when there is nothing to say);
        ``alive(pid)`` tells whether a client process still runs (dead ones are dropped)."""
        for s in self.servers:
            s.clients = [c for c in s.clients if alive(c)]
        words = line.split()
        if not words:
            return ""
        cmd, args = words[0], words[1:]
        handler = getattr(self, f"_cmd_{cmd}", None)
        if handler is None:
            raise MpsRefused(f"Unknown command {cmd!r}")
        try:
            return handler(*args)
        except TypeError as exc:
            raise MpsRefused(f"Wrong arguments for {cmd}: {' '.join(args)!r}") from exc

    def _server(self, pid: str) -> Server:
        for s in self.servers:
            if str(s.pid) == pid:
                return s
        raise MpsRefused(f"Server {pid} not found")

    @staticmethod
    def _pct(text: str) -> int:
        if not text.isdigit() or not 1 <= int(text) <= 100:
            raise MpsRefused(f"Invalid active thread percentage {text!r}: a whole number from 1 to 100")
        return int(text)

    def _start(self, uid: int) -> Server:
        active = next((s for s in self.servers if s.uid != uid and s.clients), None)
        if active is not None:
            raise MpsRefused(f"Server {active.pid} of uid {active.uid} has clients "
                             f"{active.clients}; a server for uid {uid} cannot start until they end")
        for s in self.servers:
            if s.uid != uid:  # an idle other user's server ends
                self.contexts.close(s.pid)
        self.servers = [s for s in self.servers if s.uid == uid]
        own = next((s for s in self.servers if s.uid == uid), None)
        if own is not None:
            return own
        self.contexts.open(self.next_id, uid)  # its context on the device, before any client
        server = Server(self.next_id, uid, self.default_pct, dict(self.default_pinned))
        self.next_id += 1
        self.servers.append(server)
        return server

    def _cmd_get_server_list(self) -> str:
        return "\n".join(str(s.pid) for s in self.servers)

    def _cmd_start_server(self, flag: str, uid: str) -> str:
        if flag != "-uid" or not uid.isdigit():
            raise MpsRefused("Usage: start_server -uid <user id>")
        self._start(int(uid))
        return ""

    def _cmd_get_client_list(self, pid: str) -> str:
        return "\n".join(str(c) for c in self._server(pid).clients)

    def _cmd_set_default_active_thread_percentage(self, pct: str) -> str:
        self.default_pct = self._pct(pct)
        return ""

    def _cmd_get_default_active_thread_percentage(self) -> str:
        return str(self.default_pct)

    def _cmd_set_active_thread_percentage(self, pid: str, pct: str) -> str:
        server = self._server(pid)
        server.active_thread_pct = self._pct(pct)
        return ""

    def _cmd_get_active_thread_percentage(self, pid: str) -> str:
        return str(self._server(pid).active_thread_pct)

    def _cmd_set_default_device_pinned_mem_limit(self, dev: str, value: str) -> str:
        self.default_pinned[self._dev(dev)] = parse_limit(value)
        return ""

    def _cmd_get_default_device_pinned_mem_limit(self, dev: str) -> str:
        return _size_text(self.default_pinned.get(self._dev(dev)))

    def _cmd_set_device_pinned_mem_limit(self, pid: str, dev: str, value: str) -> str:
        self._server(pid).pinned[self._dev(dev)] = parse_limit(value)
        return ""

    def _cmd_get_device_pinned_mem_limit(self, pid: str, dev: str) -> str:
        return _size_text(self._server(pid).pinned.get(self._dev(dev)))

    def _cmd_terminate_client(self, server_pid: str, client_pid: str) -> str:
        server = self._server(server_pid)
        if not client_pid.isdigit() or int(client_pid) not in server.clients:
            raise MpsRefused(f"Client {client_pid} of server {server_pid} not found")
        server.clients.remove(int(client_pid))
        return ""

    def _cmd_quit(self, *args: str) -> str:
        if args and not (args[0] == "-t" and len(args) == 2 and args[1].isdigit()):
            raise MpsRefused("Usage: quit [-t <timeout in seconds>]")
        self.quitting = True
        for s in self.servers:
            self.contexts.close(s.pid)
        return ""

    @staticmethod
    def _dev(dev: str) -> str:
        if not dev.isdigit():
            raise MpsRefused(f"Invalid device {dev!r}: the device's index as the daemon sees it (0 for "
                             f"the one device CUDA_VISIBLE_DEVICES names)")
        return dev

    # -- the simulated driver's handshake ----------------------------------------------
    def _cmd_sim_connect_client(self, uid: str, pid: str) -> str:
        """A client's CUDA context: its user's server (started on demand), and the limits it
        runs under: ``SERVER PCT BYTES`` (BYTES 0: no pinned memory limit on device 0)."""
        if not uid.isdigit() or not pid.isdigit():
            raise MpsRefused("Usage: sim_connect_client <uid> <pid>")
        server = self._start(int(uid))
        if int(pid) not in server.clients:
            server.clients.append(int(pid))
        return f"{server.pid} {server.active_thread_pct} {server.pinned.get('0', 0)}"

    def _cmd_sim_client_exit(self, pid: str) -> str:
        for s in self.servers:
            s.clients = [c for c in s.clients if str(c) != pid]
        return ""


def _size_text(n: int | None) -> str:
    if not n:
        return "0"
    for unit in ("T", "G", "M", "K"):
        if n % SIZE_UNITS[unit] == 0:
            return f"{n // SIZE_UNITS[unit]}{unit}"
    return str(n)
