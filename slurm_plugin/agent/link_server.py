"""The node agent's command endpoint on the network: HTTP/JSON, every request MUNGE-authenticated.

``POST /v1/<op>`` with a JSON object as body and ``Authorization: MUNGE <cred>``, whose claim
(:mod:`slurm_plugin.munge_auth`) binds this node, the method, the path, the body's SHA-256, a
nonce and the time. A request without a valid credential gets 401 (none, bad, expired, replayed,
tampered) or 403 (a uid other than root and the SlurmUser, or a credential made for another
node), before anything else is read of it. Every answer, refusals included, carries the agent's
own credential (``X-Gpupack-Munge``) binding the request's nonce and the answer's body, which
the helper checks (:mod:`slurm_plugin.agent.client`). Only :data:`.ops.LINK_OPS` are served;
isolation and jobs' reports stay on the node's Unix socket.
"""
from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.ops import LINK_OPS, dispatch
from slurm_plugin.agent.paths import AgentError
from slurm_plugin.agent.trust import Peer
from slurm_plugin.munge_auth import (
    ANSWER_HEADER, HEADER, Claim, CredentialRefused, MungeError, RequestVerifier, sign_answer,
)

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20
PREFIX = "/v1/"


class _Handler(BaseHTTPRequestHandler):
    server: "AgentLinkServer"
    protocol_version = "HTTP/1.1"
    timeout = 10.0
    # headers and body leave in two writes: with Nagle's algorithm the body waits for the
    # helper's delayed ACK (40 ms a request, measured by `gpupack bench link`)
    disable_nagle_algorithm = True

    def log_message(self, fmt: str, *args) -> None:  # the agent's log, not stderr
        log.debug("%s " + fmt, self.client_address[0], *args)

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            return self._answer(400, {"status": "error", "reason": "bad or too large Content-Length"}, None)
        body = self.rfile.read(length) if length else b""
        try:
            caller, claim = self.server.verifier.verify(self.headers.get(HEADER), self.command, self.path, body)
        except CredentialRefused as exc:
            log.warning("refused %s %s from %s: %s", self.command, self.path, self.client_address[0], exc.reason)
            return self._answer(exc.status, {"status": "refused", "reason": exc.reason}, None)
        status, answer = self._run(body, Peer(0, caller.uid, caller.gid))
        self._answer(status, answer, claim)

    def _run(self, body: bytes, peer: Peer) -> tuple[int, dict]:
        op = self.path[len(PREFIX):] if self.path.startswith(PREFIX) else ""
        if self.command != "POST" or op not in LINK_OPS:
            return 404, {"status": "error", "reason": f"no such command: {self.command} {self.path}"}
        try:
            request = json.loads(body or b"{}")
            if not isinstance(request, dict):
                raise ValueError("the body is not a JSON object")
            return 200, dispatch(self.server.agent, op, request, peer)
        except (AgentError, ValueError) as exc:
            log.info("%s refused: %s", op, exc)
            return 400, {"status": "error", "reason": str(exc)}
        except Exception as exc:  # a bug must not take the agent down
            log.exception("op %s failed", op)
            return 500, {"status": "error", "reason": f"agent error: {exc}"}

    def _answer(self, status: int, answer: dict, claim: Claim | None) -> None:
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        if claim is not None:
            try:
                self.send_header(ANSWER_HEADER, sign_answer(self.server.verifier.munge, claim, payload))
            except MungeError as exc:  # the helper will refuse the unsigned answer, and say so
                log.error("cannot sign the answer: %s", exc)
        self.end_headers()
        self.wfile.write(payload)


class AgentLinkServer(ThreadingHTTPServer):
    """A thread per connection (the helper keeps one connection per agent open)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], agent: NodeAgent, verifier: RequestVerifier):
        self.agent = agent
        self.verifier = verifier
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}{PREFIX}"

    def serve_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="agent-link", daemon=True)
        thread.start()
        return thread
