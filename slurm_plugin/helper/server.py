"""The helper's Unix socket: one request, one answer, peers checked by their kernel credentials.

Only root and the SlurmUser may talk to it (SO_PEERCRED), so a user cannot forge decisions
or history. A request that is too big, too slow or malformed gets a pass-through answer.
"""
from __future__ import annotations

import logging
import socket
import socketserver
from pathlib import Path
from typing import Callable

from slurm_plugin.helper.protocol import (
    MAX_REQUEST_BYTES,
    ProtocolError,
    decode_request,
    encode_response,
    request_complete,
)
from slurm_plugin.unix_socket import PeerCheckedUnixServer, peer_credentials

log = logging.getLogger(__name__)

# Requests are answered one at a time, in the accepting thread: a decision takes about
# 0.06 ms, and slurmctld sends one submission at a time anyway (it holds its job write lock),
# so a thread per request would only add its start-up to every answer. Only root and the
# SlurmUser get as far as a read; one of them stalling holds the others at most this long
# (the shim gives up after its own budget and passes its job through).
READ_TIMEOUT_S = 0.5
Handler = Callable[[dict[str, bytes]], dict[str, str]]


def peer_uid(sock: socket.socket) -> int:
    return peer_credentials(sock)[1]


def pass_through(reason: str) -> dict[str, str]:
    return {"status": "error", "verdict": "untouched", "reason": reason}


class _RequestHandler(socketserver.BaseRequestHandler):
    server: "HelperServer"

    def handle(self) -> None:
        sock: socket.socket = self.request
        uid = peer_uid(sock)
        if uid not in self.server.allowed_uids:
            log.warning("refused a connection from uid %d (allowed: %s)", uid, sorted(self.server.allowed_uids))
            self._reply(pass_through("forbidden"))
            return
        sock.settimeout(READ_TIMEOUT_S)
        buffer = bytearray()
        try:
            while not request_complete(bytes(buffer)):
                chunk = sock.recv(262144)
                if not chunk:
                    break
                buffer += chunk
                if len(buffer) > MAX_REQUEST_BYTES:
                    self._reply(pass_through("request-too-large"))
                    return
            fields = decode_request(bytes(buffer))
        except (socket.timeout, ProtocolError, OSError) as exc:
            log.warning("bad request from uid %d: %s", uid, exc)
            self._reply(pass_through("bad-request"))
            return
        command = fields.pop("op", b"submit").decode("ascii", "replace")
        handler = self.server.handlers.get(command)
        if handler is None:
            self._reply(pass_through("unknown-op"))
            return
        try:
            answer = handler(fields)
        except Exception:  # never let a bug take the helper down; the shim fails open
            log.exception("handler %s failed", command)
            answer = pass_through("helper-error")
        self._reply(answer)

    def _reply(self, answer: dict[str, str]) -> None:
        try:
            self.request.sendall(encode_response(answer))
        except OSError as exc:
            log.info("could not answer (client gone?): %s", exc)


class HelperServer(PeerCheckedUnixServer):
    """Answered one at a time in the accepting thread (see READ_TIMEOUT_S)."""

    request_queue_size = 128
    thread_name = "helper-socket"

    def __init__(self, path: Path, handlers: dict[str, Handler], allowed_uids: set[int]):
        self.handlers = handlers
        super().__init__(path, _RequestHandler, allowed_uids)


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
