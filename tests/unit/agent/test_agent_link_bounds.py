"""The agent's network link, bounded and verified (issue 33, items 5 and 6), against a private
munged: connections capped in all and per address (slots kept for the helper's address), one
deadline per request, the credential checked before a byte of the body is read and the head
before it is small, idle connections closed; on the helper's side an unsigned 401/403 is a link
failure (not the agent's refusal), an answer made outside the time window is refused, and the
nonce cache is capped and refuses when full."""
from __future__ import annotations

import http.client
import json
import os
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent.client import AgentLink, AgentUnavailable, samples, status
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.directory import AgentAddress
from slurm_plugin.agent.link_server import MAX_HEAD_BYTES, AgentLinkServer
from slurm_plugin.munge_auth import (
    ANSWER_HEADER, HEADER, SCHEME, Claim, Munge, NonceCache, PrivateMunged, RequestVerifier, sign_answer,
)
from slurm_plugin.server_bounds import Bounds

needs_munged = pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/sbin/munged").exists(),
                                  reason="needs root and munged (Debian: munge) for a private munged")
SMALL = Bounds(max_total=6, max_per_key=4, reserved=2, request_s=0.8, idle_s=0.8)


def test_the_nonce_cache_is_capped_and_refuses_when_full():
    cache = NonceCache(keep_s=100.0, max_entries=3)
    assert all(cache.admit(n, 0.0) is None for n in "abc")
    assert "refusing new requests" in cache.admit("d", 50.0)  # full of live nonces: never forgets one
    assert cache.admit("a", 50.0).startswith("replayed")
    assert cache.admit("d", 101.0) is None  # the old ones expired: room again
    assert len(cache) == 1


@pytest.fixture(scope="module")
def munge():
    if os.geteuid() != 0 or not Path("/usr/sbin/munged").exists():
        pytest.skip("needs root and munged")
    with PrivateMunged() as daemon:
        yield Munge(daemon.socket)


@pytest.fixture
def server(munge, tmp_path):
    agent = NodeAgent("node1", tmp_path, SimGpuBackend(None, "node1", gpus=["H100-80GB"]))
    agent.tick()
    srv = AgentLinkServer(("0.0.0.0", 0), agent, RequestVerifier(munge, "node1", {0}), bounds=SMALL)
    srv.serve_in_thread()
    yield srv
    srv.shutdown()
    srv.server_close()


def _link(port: int, munge) -> AgentLink:
    return AgentLink(lambda n: AgentAddress("127.0.0.1", port), munge, {0}, timeout=3.0)


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def _closed_within(s: socket.socket, seconds: float) -> bool:
    ready, _, _ = select.select([s], [], [], seconds)
    if not ready:
        return False
    try:
        return s.recv(65536) == b"" or True
    except OSError:
        return True


@needs_munged
def test_the_body_is_never_read_before_the_credential_is_accepted(server):
    """Before: up to 1 MiB of body was read (and waited for) before the credential was checked."""
    port = server.server_address[1]
    with _connect(port) as s:
        s.sendall(b"POST /v1/samples HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n"
                  b"Authorization: MUNGE garbage\r\n\r\n")  # and no body
        s.settimeout(2)
        t0 = time.monotonic()
        head = s.recv(65536)
        assert head.startswith(b"HTTP/1.1 401") and time.monotonic() - t0 < 0.5


@needs_munged
def test_a_head_past_its_small_limit_is_refused(server):
    port = server.server_address[1]
    with _connect(port) as s:
        s.sendall(b"POST /v1/samples HTTP/1.1\r\nX-Pad: " + b"a" * (MAX_HEAD_BYTES + 10) + b"\r\n\r\n")
        s.settimeout(2)
        assert s.recv(65536).startswith(b"HTTP/1.1 431")


@needs_munged
def test_a_trickling_request_is_cut_at_one_deadline(server):
    port = server.server_address[1]
    with _connect(port) as s:
        t0 = time.monotonic()
        try:
            s.sendall(b"P")
            for _ in range(50):  # a header byte every 0.1 s: each read is quick, the request never ends
                time.sleep(0.1)
                s.sendall(b"a")
        except OSError:
            pass
        assert time.monotonic() - t0 < 2.5  # SMALL.request_s = 0.8; the per-read timeout was 10 s


@needs_munged
def test_connections_are_capped_per_address_and_the_helpers_address_keeps_its_slots(server, munge):
    port = server.server_address[1]
    helper = _link(port, munge)
    assert status(helper, "node1")["node"] == "node1"  # 127.0.0.1 authenticated: trusted, its slot held
    flood = [_connect(port, "127.0.0.2") for _ in range(5)]
    time.sleep(0.1)
    refused = [s for s in flood if _closed_within(s, 0.05)]
    assert len(refused) == 2  # 6 in all, 2 kept for the trusted address: 1 (helper) + 3 (flood)
    got: list[dict] = []
    t = threading.Thread(target=lambda: got.append(status(_link(port, munge), "node1")))  # a new connection
    t.start()
    t.join(5)
    assert got and got[0]["node"] == "node1"
    t0 = time.monotonic()
    assert all(_closed_within(s, 2.0) for s in flood)  # silent connections end at their first deadline
    assert time.monotonic() - t0 < 1.5
    for s in flood:
        s.close()


@needs_munged
def test_an_idle_kept_connection_is_closed(server, munge):
    port = server.server_address[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
    helper = _link(port, munge)
    assert status(helper, "node1")["node"] == "node1"
    time.sleep(0.1)
    assert server.slots.total == 1  # the helper's kept connection
    time.sleep(SMALL.idle_s + 0.5)
    assert server.slots.total == 0  # closed when idle past idle_s
    assert status(helper, "node1")["node"] == "node1"  # the helper reconnects on its own
    conn.close()


class _Forger(BaseHTTPRequestHandler):
    """Answers as an agent would, in the way the test says."""

    munge: Munge
    mode = "unsigned-403"

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if _Forger.mode == "unsigned-403":
            body, code, sig = json.dumps({"status": "refused", "reason": "go away"}).encode(), 403, None
        else:  # a genuine signature of this request's nonce, made 10,000 s ago
            decoded = _Forger.munge.decode(self.headers[HEADER][len(SCHEME):])
            claim = Claim.decode(decoded.payload)
            body, code = json.dumps({"status": "ok", "node": "node1", "samples": [], "now": 1.0}).encode(), 200
            sig = sign_answer(_Forger.munge, claim, body, clock=lambda: time.time() - 10_000)
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        if sig:
            self.send_header(ANSWER_HEADER, sig)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@needs_munged
def test_an_unsigned_refusal_is_a_link_failure_and_an_old_answer_is_refused(munge):
    _Forger.munge = munge
    fake = ThreadingHTTPServer(("127.0.0.1", 0), _Forger)
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    try:
        link = _link(fake.server_address[1], munge)
        _Forger.mode = "unsigned-403"
        with pytest.raises(AgentUnavailable, match="unsigned 403"):  # before: AgentRefused
            status(link, "node1")
        _Forger.mode = "old"
        with pytest.raises(AgentUnavailable, match="made \\+1000\\d s ago"):  # before: accepted
            samples(link, "node1")
    finally:
        fake.shutdown()
        fake.server_close()
