"""The node agent's Unix socket: one JSON line in, one answer out; peers checked by SO_PEERCRED.

The SPANK plugin asks with ``"format": "lines"`` and gets the plain-text answer of
:func:`slurm_plugin.agent.isolation.answer_lines`; every other client gets one JSON line.
"""
from __future__ import annotations

import json
import logging
import socket
import socketserver
from pathlib import Path

from slurm_plugin.agent import isolation as iso
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.ops import dispatch
from slurm_plugin.agent.paths import AgentError
from slurm_plugin.agent.trust import Peer, ReportRejected, may_call, peer_of
from slurm_plugin.unix_socket import PeerCheckedUnixServer

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 64 * 1024
READ_TIMEOUT_S = 2.0


class _Handler(socketserver.BaseRequestHandler):
    server: "AgentServer"

    def handle(self) -> None:
        sock: socket.socket = self.request
        peer = peer_of(sock)
        sock.settimeout(READ_TIMEOUT_S)
        data = b""
        try:
            while b"\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
                if len(data) > MAX_REQUEST_BYTES:
                    return self._send({"status": "error", "reason": "request too large"}, False)
            body = json.loads(data.split(b"\n", 1)[0] or b"{}")
            if not isinstance(body, dict):
                raise ValueError("request is not a JSON object")
        except (OSError, ValueError) as exc:
            log.warning("bad request from pid %d uid %d: %s", peer.pid, peer.uid, exc)
            return self._send({"status": "error", "reason": f"bad request: {exc}"}, False)
        lines = body.get("format") == "lines"
        op = str(body.get("op", ""))
        if not may_call(op, peer, self.server.allowed_uids):
            log.warning("refused op %r from pid %d uid %d", op, peer.pid, peer.uid)
            return self._send({"status": "error", "reason": f"op {op!r} is not allowed for uid {peer.uid}"}, lines)
        try:
            answer = self.server.dispatch(op, body, peer)
        except (AgentError, ValueError) as exc:  # ReportRejected is a ValueError
            level = logging.INFO if isinstance(exc, ReportRejected) else logging.WARNING
            log.log(level, "%s from pid %d uid %d: %s", op, peer.pid, peer.uid, exc)
            answer = {"status": "error", "reason": str(exc)}
        except Exception as exc:  # never let a bug take the agent down; the plugin fails open
            log.exception("op %s failed", op)
            answer = {"status": "error", "reason": f"agent error: {exc}"}
        self._send(answer, lines)

    def _send(self, answer: dict, lines: bool) -> None:
        if lines:
            if answer.get("status") == "ok":
                text = iso.answer_lines(answer.get("isolation", "none"), answer.get("env", {}),
                                        answer.get("fence"))
            else:
                text = iso.error_line(answer.get("reason", "error"))
            payload = text.encode()
        else:
            payload = (json.dumps(answer) + "\n").encode()
        try:
            self.request.sendall(payload)
        except OSError as exc:
            log.info("could not answer (client gone?): %s", exc)


class AgentServer(socketserver.ThreadingMixIn, PeerCheckedUnixServer):
    """A thread per request: a slow job's report must not hold up a step's isolation."""

    daemon_threads = True
    thread_name = "agent-socket"

    def __init__(self, path: Path, agent: NodeAgent, allowed_uids: set[int]):
        self.agent = agent
        super().__init__(path, _Handler, allowed_uids)

    def dispatch(self, op: str, body: dict, peer: Peer) -> dict:
        return dispatch(self.agent, op, body, peer)
