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

import http.client
import json
import logging
import select
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.ops import LINK_OPS, dispatch
from slurm_plugin.agent.paths import AgentError
from slurm_plugin.agent.trust import Peer
from slurm_plugin.server_bounds import AuthenticatedPools, DeadlineWatch, PoolBounds, RefusalCounter
from slurm_plugin.munge_auth import (
    ANSWER_HEADER, HEADER, Claim, CredentialRefused, MungeError, RequestVerifier, sign_answer,
)

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20  # read only once the request's credential is accepted
MAX_HEAD_BYTES = 16 * 1024  # the request line and headers: all that is read before authentication
PREFIX = "/v1/"
#: Trust attaches to connections, never to addresses: on the controller host every user connects
#: from the helper's address (a live flood by uid nobody took every slot the address-based reserve
#: kept, issue 33). 32 unauthenticated connections at once, 24 of one address; when full, a new
#: connection closes the oldest unauthenticated one (one still sending its head before one being
#: verified), so the helper, which sends its signed head at once, gets through a flood of slow
#: partial heads. 32 authenticated connections (the helper keeps one per agent and thread: 16, and
#: the web view's). A request's head within 3 s of its first byte (the helper sends it in one
#: write), the rest 10 s (verified, read, run, answered); a kept connection idle 60 s is closed (the
#: helper asks every round), a new one that says nothing in 3 s too (unless a newer one evicts it
#: first): an unauthenticated connection sending its head holds its slot 6 s at most.
BOUNDS = PoolBounds(max_unauthenticated=32, max_unauthenticated_per_key=24, max_authenticated=32,
                    head_s=3.0, request_s=10.0, idle_s=60.0)
#: the kernel's queue of connections not yet accepted: the stdlib's 5 fills within a burst of
#: connects (each past it waits, or is refused with ECONNREFUSED/a reset, before the accept loop can
#: even evict for it); eviction happens after accept, so the queue must absorb a burst
LISTEN_BACKLOG = 128


class _CappedReader:
    """The connection's reader, counting what a request reads before it is authenticated."""

    def __init__(self, raw):
        self.raw = raw
        self.left = MAX_HEAD_BYTES

    def readline(self, limit: int = -1) -> bytes:
        if self.left <= 0:
            raise http.client.LineTooLong(f"request head over {MAX_HEAD_BYTES} bytes")
        want = self.left + 1 if limit is None or limit < 0 else min(limit, self.left + 1)
        line = self.raw.readline(want)
        self.left -= len(line)
        if self.left < 0:
            raise http.client.LineTooLong(f"request head over {MAX_HEAD_BYTES} bytes")
        return line

    def read(self, n: int = -1) -> bytes:  # the body: after authentication only (Content-Length bound)
        return self.raw.read(n)

    def __getattr__(self, name):
        return getattr(self.raw, name)


class _Handler(BaseHTTPRequestHandler):
    server: "AgentLinkServer"
    protocol_version = "HTTP/1.1"
    timeout = 10.0  # a backstop per read; the request's deadline (BOUNDS.request_s) is what bounds it
    # headers and body leave in two writes: with Nagle's algorithm the body waits for the
    # helper's delayed ACK (40 ms a request, measured by `gpupack bench link`)
    disable_nagle_algorithm = True

    def __init__(self, request, client_address, server: "AgentLinkServer", ticket: int):
        self.ticket = ticket  # its place in the server's pools (the handler runs within __init__)
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        super().setup()
        self.rfile = _CappedReader(self.rfile)
        self._deadline: int | None = None
        self._counted = False  # this request's refusal is counted (once, whatever ends it)

    def _cut(self) -> str | None:
        """Why the server shut this connection under the handler: "deadline", "evicted" or None."""
        if self._deadline is not None and self.server.deadlines.fired(self._deadline):
            return "deadline"
        if self.server.pools.evicted(self.ticket):
            return "evicted"
        return None

    def _refuse(self, reason: str, detail: str) -> None:
        """Count this request's refusal once: a head cut off by its deadline reads as complete but
        is the deadline's (counted as such), and an evicted one was counted when evicted."""
        if self._counted:
            return
        self._counted = True
        cut = self._cut()
        if cut == "evicted":
            return
        if cut == "deadline":
            b = self.server.bounds
            reason, detail = "deadline", (f"{self.client_address[0]}: request not done within its deadline "
                                          f"({b.head_s:g} s its head, {b.request_s:g} s the rest)")
        self.server.refusals.refused(reason, detail)

    def _rearm(self, seconds: float) -> None:
        if self._deadline is not None:
            self.server.deadlines.disarm(self._deadline)
        self._deadline = self.server.deadlines.arm(self.connection, seconds)

    def handle(self) -> None:
        """Each request's head within ``head_s`` of its first byte, the rest within ``request_s``; a
        connection whose next request does not start within ``idle_s`` (the first within
        ``head_s``) is closed."""
        bounds = self.server.bounds
        wait = bounds.head_s
        self.close_connection = False
        while not self.close_connection:
            ready, _, _ = select.select([self.connection], [], [], wait)
            if not ready:
                self.server.refusals.refused("idle", f"{self.client_address[0]}: no request within {wait:g} s")
                return
            self.rfile.left = MAX_HEAD_BYTES
            self._counted = False
            self._deadline = self.server.deadlines.arm(self.connection, bounds.head_s)
            try:
                self.handle_one_request()
            except OSError:  # the deadline shut it down, it was evicted, or the client went away
                self._refuse("deadline", f"{self.client_address[0]}: request not done within its "
                                         f"deadline ({bounds.head_s:g} s its head, {bounds.request_s:g} s "
                                         "the rest), or the client left")
                return
            finally:
                self.server.deadlines.disarm(self._deadline)
                self._deadline = None
            wait = bounds.idle_s

    def log_message(self, fmt: str, *args) -> None:  # the agent's log, not stderr
        log.debug("%s " + fmt, self.client_address[0], *args)

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        if self._cut() is not None:  # the head was cut off (it reads as complete): nothing to answer
            self.close_connection = True
            return self._refuse("deadline", "")
        self._rearm(self.server.bounds.request_s)  # the head is in: the rest (verified, run, answered)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True
            return self._answer(400, {"status": "error", "reason": "bad or too large Content-Length"}, None)
        verifier, pools = self.server.verifier, self.server.pools
        if not pools.verifying(self.ticket):  # evicted while its head was read
            self.close_connection = True
            return None
        try:  # before a byte of the body is read
            caller, claim = verifier.verify_credential(self.headers.get(HEADER), self.command, self.path)
        except CredentialRefused as exc:
            pools.refused(self.ticket)
            self._refuse("credential", f"{self.command} {self.path[:60]} from "
                                       f"{self.client_address[0]}: {exc.reason}")
            self.close_connection = True  # its body is never read: the connection cannot carry another
            return self._answer(exc.status, {"status": "refused", "reason": exc.reason}, None)
        if pools.evicted(self.ticket):  # evicted while munged decoded its credential: nobody to answer
            self.close_connection = True
            return None
        if not pools.authenticated(self.ticket):  # that pool is full: this request is served, not kept
            cap = self.server.bounds.max_authenticated
            self.server.refusals.refused("busy", f"{self.client_address[0]}: {cap} authenticated connections "
                                                 "open; this one closes after its answer")
            self.close_connection = True
        body = self.rfile.read(length) if length else b""
        if len(body) != length:
            self.close_connection = True
            return None
        try:
            verifier.check_body(claim, body)
        except CredentialRefused as exc:
            self._refuse("credential", f"{self.command} {self.path[:60]} from "
                                       f"{self.client_address[0]}: {exc.reason}")
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
    """A thread per connection (the helper keeps one connection per agent open), within
    :data:`BOUNDS` (:class:`AuthenticatedPools`): a new connection is always admitted; the
    unauthenticated one it evicts, when the pool is full, is shut down at accept and counted as
    "evicted" (logged at a bounded rate), and its thread ends with it."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], agent: NodeAgent, verifier: RequestVerifier,
                 bounds: PoolBounds = BOUNDS):
        self.agent = agent
        self.verifier = verifier
        self.bounds = bounds
        self.pools = AuthenticatedPools(bounds)
        self.deadlines = DeadlineWatch("agent-link")
        self.refusals = RefusalCounter(log, "agent link")
        super().__init__(address, _Handler)

    def process_request(self, request, client_address) -> None:
        host = client_address[0]
        ticket, evicted = self.pools.admit(host, request)
        for victim in evicted:
            self._evict(victim)
        threading.Thread(target=self._serve_one, args=(request, client_address, ticket),
                         name="agent-link-request", daemon=True).start()

    def _evict(self, victim: socket.socket) -> None:
        """Shut down an evicted connection: its handler's read ends, and its thread with it."""
        try:
            peer = victim.getpeername()[0]
        except OSError:
            peer = "?"
        self.refusals.refused("evicted", f"{peer}: the oldest unauthenticated connection, closed for a new one")
        try:
            victim.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _serve_one(self, request, client_address, ticket: int) -> None:
        try:
            _Handler(request, client_address, self, ticket)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.pools.release(ticket)
            self.shutdown_request(request)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}{PREFIX}"

    def serve_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="agent-link", daemon=True)
        thread.start()
        return thread
