"""What a hostile party puts between the suite's parts in the live hostile-user tests: an answer on
a node's agent socket that is cut short, and a man in the middle of the helper's link to an agent."""
from __future__ import annotations

import http.client
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from slurm_plugin.agent.directory import AgentAddress
from slurm_plugin.munge_auth import ANSWER_HEADER, SCHEME, Claim, Munge, sign_answer


class CutShortAgent:
    """A Unix socket at ``path`` (a node's agent socket, seen from here) that answers every request
    with ``answer`` and closes: an "OK ..." without its END line, as an agent that died mid-answer
    leaves it. ``asked`` counts the requests it read."""

    def __init__(self, path: Path, answer: bytes):
        self.path = path
        self.answer = answer
        self.asked = 0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="cut-short-agent", daemon=True)

    def __enter__(self) -> "CutShortAgent":
        # bound through the folder's descriptor: the path through a node's holder may pass sun_path's 108 bytes
        folder = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self._sock.bind(f"/proc/self/fd/{folder}/{self.path.name}")
        finally:
            os.close(folder)
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()
        self.path.unlink(missing_ok=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(2.0)
                data = b""
                try:
                    while b"\n" not in data and (chunk := conn.recv(65536)):
                        data += chunk
                    self.asked += 1
                    conn.sendall(self.answer)
                except OSError:
                    pass


class LinkTamperer:
    """A man in the middle of the helper's link to one agent: it forwards each request to the agent
    at ``upstream`` and hands back, by ``mode``: ``faithful`` the agent's answer as it is;
    ``unsigned`` a 403 of its own without the agent's signature; ``stale`` the agent's answer,
    signed again (with root's credential from ``munge``: the strongest forger) as made
    ``stale_s`` seconds ago. ``address`` is where the helper's side should send its requests."""

    def __init__(self, upstream: AgentAddress, munge: Munge, stale_s: float = 120.0):
        self.upstream = upstream
        self.munge = munge
        self.stale_s = stale_s
        self.mode = "faithful"
        self.served: dict[str, int] = {}
        tamperer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # the test's output stays quiet
                pass

            def do_POST(self) -> None:
                tamperer._handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="link-tamperer", daemon=True)

    @property
    def address(self) -> AgentAddress:
        host, port = self._server.server_address[:2]
        return AgentAddress(host, port)

    def __enter__(self) -> "LinkTamperer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        mode = self.mode
        self.served[mode] = self.served.get(mode, 0) + 1
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        if mode == "unsigned":
            self._reply(handler, 403, b'{"status": "error", "reason": "credential refused"}', None)
            return
        upstream = http.client.HTTPConnection(self.upstream.host, self.upstream.port, timeout=10)
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in ("host", "connection")}
            upstream.request("POST", handler.path, body, headers)
            response = upstream.getresponse()
            data, signature = response.read(), response.getheader(ANSWER_HEADER)
        finally:
            upstream.close()
        if mode == "stale" and signature is not None:
            claim = Claim.decode(self.munge.decode(signature[len(SCHEME):]).payload)
            signature = sign_answer(self.munge, claim, data, clock=lambda: time.time() - self.stale_s)
        self._reply(handler, response.status, data, signature)

    @staticmethod
    def _reply(handler: BaseHTTPRequestHandler, status: int, data: bytes, signature: str | None) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        if signature is not None:
            handler.send_header(ANSWER_HEADER, signature)
        handler.end_headers()
        handler.wfile.write(data)
