"""The local Unix sockets of the helper and the node agent: one shape, one place.

Anyone may connect (jobs report to their agent); each server checks the peer's kernel
credentials (SO_PEERCRED) and answers only whom it trusts.
"""
from __future__ import annotations

import os
import socket
import socketserver
import struct
import threading
from pathlib import Path


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end, as the kernel reports them."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", creds)
    return pid, uid, gid


class SocketInUse(OSError):
    """Another process serves the socket path a server was to bind."""


def _answers(path: Path) -> bool:
    """Whether a process listens at the socket `path` now (a stale file refuses connections)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(str(path))
        return True
    except (ConnectionRefusedError, FileNotFoundError, NotADirectoryError):
        return False
    except OSError:  # a full backlog or a slow peer: someone is there
        return True
    finally:
        probe.close()


def clear_socket_path(path: Path) -> None:
    """Make room for a socket at `path`: its folder exists, a stale socket is gone.

    A socket some process still serves is left alone (`SocketInUse`): replacing it would cut
    that server off from every new client (a second helper, or a tool built on a live
    cluster's settings, would take slurmctld's shim away from the running one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_socket() and _answers(path):
        raise SocketInUse(f"{path} is served by a running process; stop it first (or use another path)")
    if path.exists() or path.is_socket():
        path.unlink()


class PeerCheckedUnixServer(socketserver.UnixStreamServer):
    """Binds `path` (replacing a stale socket), world-connectable; root is always trusted."""

    allow_reuse_address = True
    thread_name = "unix-socket"

    def __init__(self, path: Path, handler_class: type[socketserver.BaseRequestHandler], allowed_uids: set[int]):
        self.socket_path = Path(path)
        self.allowed_uids = set(allowed_uids) | {0}
        clear_socket_path(self.socket_path)
        super().__init__(str(self.socket_path), handler_class)
        os.chmod(self.socket_path, 0o666)

    def serve_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name=self.thread_name, daemon=True)
        thread.start()
        return thread

    def server_close(self) -> None:
        super().server_close()
        self.socket_path.unlink(missing_ok=True)
