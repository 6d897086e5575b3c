"""The helper's Unix socket: requests answered in order, peers checked by their kernel credentials.

Only root and the SlurmUser may talk to it (SO_PEERCRED), so a user cannot forge decisions
or history. A request that is too big, too slow or malformed gets a pass-through answer,
and its connection is closed. Every refusal is counted and logged at a bounded rate, and each
user's requests are limited (`slurm_plugin.refusals`, `[limits]`).

A connection may carry many requests, one after the other: the shim inside slurmctld keeps
one open between submissions (no connect, accept and close per job), tools open one per
request. One thread serves them all: a decision takes a fraction of a millisecond and
slurmctld sends one submission at a time anyway (it holds its job write lock), so a thread
per connection would only add wake-ups. The loop never waits on one client: a request that
arrives in pieces is kept in its connection's buffer until it is whole, and refused when it is not
whole READ_TIMEOUT_S after its first byte (one deadline per request); a connection idle for
IDLE_S is closed (the shim opens a fresh one on its next submission). At most MAX_CONNECTIONS are
open, MAX_PER_UID of one uid. The per-user rate limit is kept per submitter (the ``uid`` field
slurmctld's shim sends), not per peer: slurmctld's peer uid is one for every user.

A handler may return a :class:`Reply` whose ``after`` runs once the answer is sent: logging
and bookkeeping stay off the clock slurmctld is waiting on.
"""
from __future__ import annotations

import logging
import os
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Union

from slurm_plugin.helper.protocol import MAX_REQUEST_BYTES, ProtocolError, encode_response, split_request
from slurm_plugin.unix_socket import clear_socket_path, peer_credentials

if TYPE_CHECKING:  # `ask` stays standard library only: the controller's epilog imports it
    from slurm_plugin.refusals import RefusalLog, UserLimits

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 0.5  # the longest a started request may take to arrive in full
MAX_CONNECTIONS = 64  # open at once; more are answered "busy" and closed
MAX_PER_UID = 48  # of them, one uid's (root's tools cannot shut slurmctld's shim out, nor it them)
IDLE_S = 300.0  # a kept connection with no request for this long is closed


@dataclass
class Reply:
    """An answer, and work to do once it has been sent."""

    fields: dict[str, str]
    after: Callable[[], None] | None = None


Handler = Callable[[dict[str, bytes]], Union[dict[str, str], Reply]]


def peer_uid(sock: socket.socket) -> int:
    return peer_credentials(sock)[1]


def pass_through(reason: str) -> dict[str, str]:
    return {"status": "error", "verdict": "untouched", "reason": reason}


@dataclass
class _Connection:
    sock: socket.socket
    uid: int
    buffer: bytes = b""  # bytes, not bytearray: field values are slices of it
    started: float | None = None  # when the request now in the buffer began to arrive
    last: float = 0.0  # the last time a byte arrived


class HelperServer:
    """Binds `path` (replacing a stale socket), world-connectable; root is always trusted."""

    request_queue_size = 128
    thread_name = "helper-socket"

    def __init__(self, path: Path, handlers: dict[str, Handler], allowed_uids: set[int], *,
                 refusals: RefusalLog | None = None, limits: UserLimits | None = None):
        self.socket_path = Path(path)
        self.handlers = handlers
        self.allowed_uids = set(allowed_uids) | {0}
        # refused connections and bad requests: counted, logged at a bounded rate; per-user limits
        if refusals is None:
            from slurm_plugin.refusals import RefusalLog  # prometheus_client, not needed by `ask`

            refusals = RefusalLog(log)
        self.refusals = refusals
        self.limits = limits
        clear_socket_path(self.socket_path)
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.socket.bind(str(self.socket_path))
            os.chmod(self.socket_path, 0o666)
            self.socket.listen(self.request_queue_size)
        except OSError:
            self.socket.close()
            raise
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        self._connections: dict[int, _Connection] = {}
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()

    # -- running -----------------------------------------------------------------------

    def serve_in_thread(self) -> threading.Thread:
        self._stopped.clear()  # before the thread runs: a shutdown() right away must wait for it
        thread = threading.Thread(target=self.serve_forever, name=self.thread_name, daemon=True)
        thread.start()
        return thread

    def serve_forever(self) -> None:
        self._stopped.clear()
        selector = self._selector
        selector.register(self.socket, selectors.EVENT_READ, None)
        selector.register(self._wake_read, selectors.EVENT_READ, "wake")
        try:
            while not self._stop.is_set():
                for key, _events in selector.select(self._next_timeout()):
                    if key.data is None:
                        self._accept()
                    elif isinstance(key.data, _Connection):
                        self._serve(key.data)
                self._sweep()
        finally:
            for conn in list(self._connections.values()):
                self._close(conn)
            selector.unregister(self.socket)
            selector.unregister(self._wake_read)
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop serving and wait until the loop has let go of every connection."""
        self._stop.set()
        try:
            os.write(self._wake_write, b"x")
        except OSError:
            pass
        self._stopped.wait()

    def server_close(self) -> None:
        self.socket.close()
        self._selector.close()
        for fd in (self._wake_read, self._wake_write):
            try:
                os.close(fd)
            except OSError:
                pass
        self.socket_path.unlink(missing_ok=True)

    # -- deadlines ---------------------------------------------------------------------

    def _next_timeout(self) -> float | None:
        """Seconds until the next request deadline or idle end (None: nothing to wait for)."""
        if not self._connections:
            return None
        now = time.monotonic()
        ends = [c.started + READ_TIMEOUT_S if c.started is not None else c.last + IDLE_S
                for c in self._connections.values()]
        return max(0.0, min(ends) - now)

    def _sweep(self) -> None:
        """Refuse each request not whole within its deadline; close each connection idle too long."""
        now = time.monotonic()
        for conn in list(self._connections.values()):
            if conn.started is not None and now - conn.started > READ_TIMEOUT_S:
                self.refusals.refused("bad-request", conn.uid, f"request not complete within {READ_TIMEOUT_S:g} s")
                self._send(conn.sock, pass_through("bad-request"))
                self._close(conn)
            elif conn.started is None and now - conn.last > IDLE_S:
                log.debug("closing a connection of uid %d idle for %.0f s", conn.uid, now - conn.last)
                self._close(conn)

    # -- one connection ----------------------------------------------------------------

    def _accept(self) -> None:
        try:
            sock, _ = self.socket.accept()
        except OSError as exc:  # out of descriptors: let the backlog wait a moment
            log.warning("cannot accept a connection: %s", exc)
            time.sleep(0.01)
            return
        uid = peer_uid(sock)
        if uid not in self.allowed_uids:
            self.refusals.refused("forbidden", uid, f"connection not allowed (allowed: {sorted(self.allowed_uids)})")
            self._send(sock, pass_through("forbidden"))
            sock.close()
            return
        if len(self._connections) >= MAX_CONNECTIONS or \
                sum(1 for c in self._connections.values() if c.uid == uid) >= MAX_PER_UID:
            self.refusals.refused("busy", uid, f"{MAX_CONNECTIONS} connections open already, or {MAX_PER_UID} "
                                               f"of uid {uid}")
            self._send(sock, pass_through("busy"))
            sock.close()
            return
        sock.settimeout(READ_TIMEOUT_S)  # the answer's write; reads happen only when bytes are there
        conn = _Connection(sock, uid, last=time.monotonic())
        self._connections[sock.fileno()] = conn
        self._selector.register(sock, selectors.EVENT_READ, conn)

    def _close(self, conn: _Connection) -> None:
        self._connections.pop(conn.sock.fileno(), None)
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def _serve(self, conn: _Connection) -> None:
        """Read what arrived (never waiting for more); answer every whole request in it; keep a
        request not whole yet for the next bytes (its deadline runs from its first byte); close on
        EOF or trouble."""
        try:
            chunk = conn.sock.recv(262144, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close(conn)
            return
        now = time.monotonic()
        conn.last = now
        if conn.started is None:
            conn.started = now
        conn.buffer += chunk
        while conn.buffer:
            try:
                parsed = split_request(conn.buffer)
            except ProtocolError as exc:
                self.refusals.refused("bad-request", conn.uid, str(exc))
                self._send(conn.sock, pass_through("bad-request"))
                self._close(conn)
                return
            if parsed is None:  # not whole yet: wait for its next bytes (the sweep keeps its deadline)
                if len(conn.buffer) > MAX_REQUEST_BYTES:
                    self.refusals.refused("request-too-large", conn.uid, f"over {MAX_REQUEST_BYTES} bytes")
                    self._send(conn.sock, pass_through("request-too-large"))
                    self._close(conn)
                return
            fields, end = parsed
            conn.buffer = conn.buffer[end:]
            conn.started = now if conn.buffer else None
            if not self._answer(conn, fields):
                self._close(conn)
                return

    def _answer(self, conn: _Connection, fields: dict[str, bytes]) -> bool:
        command = fields.pop("op", b"submit").decode("ascii", "replace")
        handler = self.handlers.get(command)
        after = None
        if self.limits is not None and not self.limits.allow(_rate_key(conn.uid, fields)):
            self.refusals.refused("rate-limited", conn.uid, f"over {self.limits.rate:g} requests/s")
            return self._send(conn.sock, pass_through("rate-limited"))
        if handler is None:
            self.refusals.refused("unknown-op", conn.uid, f"op {command!r}")
            answer = pass_through("unknown-op")
        else:
            try:
                result = handler(fields)
                answer, after = (result.fields, result.after) if isinstance(result, Reply) else (result, None)
            except Exception:  # never let a bug take the helper down; the shim fails open
                log.exception("handler %s failed", command)
                answer = pass_through("helper-error")
        sent = self._send(conn.sock, answer)
        if after is not None:
            try:
                after()
            except Exception:
                log.exception("after answering %s", command)
        return sent

    @staticmethod
    def _send(sock: socket.socket, answer: dict[str, str]) -> bool:
        try:
            payload = encode_response(answer)
        except ValueError:
            log.exception("unencodable answer %r", answer)
            payload = encode_response(pass_through("helper-error"))
        try:
            sock.sendall(payload)
            return True
        except OSError as exc:
            log.info("could not answer (client gone?): %s", exc)
            return False


def _rate_key(peer_uid: int, fields: dict[str, bytes]) -> tuple[int, int | None]:
    """Whose requests a rate limit counts: the submitter's (the ``uid`` slurmctld's shim sends) on
    each peer, so one user's flood of submissions never spends every other user's budget."""
    raw = fields.get("uid")
    try:
        return peer_uid, int(raw) if raw is not None else None
    except ValueError:
        return peer_uid, None


def ask(path: Path | str, fields: dict[str, bytes | str], timeout: float = 2.0) -> dict[str, str]:
    """A client for tests and tools: send one request, return the decoded answer."""
    from slurm_plugin.helper.protocol import decode_response, encode_request

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        try:
            sock.sendall(encode_request(fields))
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before we finished (peer check): its one-line answer is still there to read
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return decode_response(data)
