"""The node agent's Unix socket: one JSON line in, one answer out; peers checked by SO_PEERCRED.

The SPANK plugin asks with ``"format": "lines"`` and gets the plain-text answer of
:func:`slurm_plugin.agent.isolation.answer_lines`; every other client gets one JSON line.
"""
from __future__ import annotations

import json
import logging
import socket
import socketserver
import threading
from pathlib import Path

from slurm_plugin.agent import isolation as iso
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.ops import dispatch
from slurm_plugin.agent.paths import AgentError, StepRefused
from slurm_plugin.agent.trust import Peer, ReportRejected, may_call, peer_of
from slurm_plugin.server_bounds import Bounds, ConnectionSlots, DeadlineWatch, RefusalCounter
from slurm_plugin.unix_socket import PeerCheckedUnixServer

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 64 * 1024  # root's and the SlurmUser's (an isolation request)
MAX_OPEN_REQUEST_BYTES = 8 * 1024  # any other uid's (a job's report): it is read no further
READ_TIMEOUT_S = 2.0  # the whole request, however it trickles in; the answer's write the same
#: 128 connections at once, 16 of one uid; 32 kept for root and the SlurmUser (slurmstepd's
#: isolation requests get in whatever a user floods); one request per connection
BOUNDS = Bounds(max_total=128, max_per_key=16, reserved=32, request_s=READ_TIMEOUT_S, idle_s=READ_TIMEOUT_S)


class _Handler(socketserver.BaseRequestHandler):
    server: "AgentServer"

    def handle(self) -> None:
        sock: socket.socket = self.request
        peer = peer_of(sock)
        privileged = peer.uid in self.server.allowed_uids
        limit = MAX_REQUEST_BYTES if privileged else MAX_OPEN_REQUEST_BYTES
        sock.settimeout(self.server.bounds.request_s)
        token = self.server.deadlines.arm(sock, self.server.bounds.request_s)  # one deadline, not per read
        data = b""
        try:
            while b"\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
                if len(data) > limit and b"\n" not in data[:limit + 1]:  # read no further
                    self.server.refusals.refused("too-large", f"uid {peer.uid} pid {peer.pid}: over {limit} bytes")
                    return self._send({"status": "error", "reason": "request too large"}, False)
            if b"\n" not in data:  # the client closed, or its deadline passed, before a whole request
                self.server.refusals.refused("incomplete", f"uid {peer.uid} pid {peer.pid}: {len(data)} bytes "
                                                           f"and no whole request within {self.server.bounds.request_s:g} s")
                return None
            line = data.split(b"\n", 1)[0]
            if len(line) > limit:
                self.server.refusals.refused("too-large", f"uid {peer.uid} pid {peer.pid}: over {limit} bytes")
                return self._send({"status": "error", "reason": "request too large"}, False)
            body = json.loads(line or b"{}")
            if not isinstance(body, dict):
                raise ValueError("request is not a JSON object")
        except OSError as exc:  # its deadline passed (the watch shut it down), or the client is gone
            self.server.refusals.refused("incomplete", f"uid {peer.uid} pid {peer.pid}: {exc}")
            return None
        except ValueError as exc:
            self.server.refusals.refused("bad-request", f"uid {peer.uid} pid {peer.pid}: {exc}")
            return self._send({"status": "error", "reason": f"bad request: {exc}"}, False)
        finally:
            self.server.deadlines.disarm(token)
        lines = body.get("format") == "lines"
        op = str(body.get("op", ""))
        if not may_call(op, peer, self.server.allowed_uids):
            self.server.refusals.refused("forbidden", f"op {op[:40]!r} from pid {peer.pid} uid {peer.uid}")
            return self._send({"status": "error", "reason": f"op {op!r} is not allowed for uid {peer.uid}"}, lines)
        try:
            answer = self.server.dispatch(op, body, peer)
        except (AgentError, ValueError) as exc:  # ReportRejected is a ValueError
            level = logging.INFO if isinstance(exc, ReportRejected) else logging.WARNING
            log.log(level, "%s from pid %d uid %d: %s", op, peer.pid, peer.uid, exc)
            answer = {"status": "error", "reason": str(exc), "step_caused": isinstance(exc, StepRefused)}
        except Exception as exc:  # never let a bug take the agent down; the plugin fails open
            log.exception("op %s failed", op)
            answer = {"status": "error", "reason": f"agent error: {exc}"}
        self._send(answer, lines)

    def _send(self, answer: dict, lines: bool) -> None:
        if lines:
            if answer.get("status") == "ok":
                text = iso.answer_lines(answer.get("isolation", "none"), answer.get("env", {}),
                                        answer.get("fence"), answer.get("prepend"))
            else:
                text = iso.error_line(answer.get("reason", "error"), bool(answer.get("step_caused")))
            payload = text.encode()
        else:
            payload = (json.dumps(answer) + "\n").encode()
        token = self.server.deadlines.arm(self.request, self.server.bounds.request_s)
        try:
            self.request.sendall(payload)
        except OSError as exc:
            log.debug("could not answer (client gone, or its deadline passed): %s", exc)
        finally:
            self.server.deadlines.disarm(token)


class AgentServer(PeerCheckedUnixServer):
    """A thread per request (a slow job's report must not hold up a step's isolation), within
    :data:`BOUNDS`: a connection past them is closed at once, before anything is read or a thread
    started, and counted (logged at a bounded rate)."""

    thread_name = "agent-socket"
    #: connections not yet accepted: the stdlib's 5 fill within a burst of a user's connects, and
    #: then slurmstepd's connect() waits (the SPANK plugin bounds it by its timeout_ms); the accept
    #: loop refuses a flood's connections at once, so a deep queue drains quickly
    request_queue_size = 128

    def __init__(self, path: Path, agent: NodeAgent, allowed_uids: set[int], bounds: Bounds = BOUNDS):
        self.agent = agent
        self.bounds = bounds
        self.slots = ConnectionSlots(bounds)
        self.deadlines = DeadlineWatch("agent-socket")
        self.refusals = RefusalCounter(log, "agent socket")
        super().__init__(path, _Handler, allowed_uids)

    def process_request(self, request, client_address) -> None:
        peer = peer_of(request)
        why = self.slots.acquire(peer.uid, privileged=peer.uid in self.allowed_uids)
        if why is not None:
            self.refusals.refused("busy", f"uid {peer.uid} pid {peer.pid}: {why}")
            self.shutdown_request(request)
            return
        threading.Thread(target=self._serve_one, args=(request, client_address, peer.uid),
                         name="agent-request", daemon=True).start()

    def _serve_one(self, request, client_address, uid: int) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.slots.release(uid)
            self.shutdown_request(request)

    def dispatch(self, op: str, body: dict, peer: Peer) -> dict:
        return dispatch(self.agent, op, body, peer)
