"""The node agent's Unix socket is bounded whoever connects (issue 33, item 5): connections in all
and per uid (slots kept for root and the SlurmUser), one deadline per request however the bytes
trickle in, idle connections closed, an unprivileged request read no further than a small limit,
and a flood costs a bounded number of log lines. Before: a thread per connection with no cap and a
per-read timeout (uid nobody held 200 threads for 10 s and more)."""
from __future__ import annotations

import logging
import os
import select
import socket
import tempfile
import threading
import time

import pytest

from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.server import MAX_OPEN_REQUEST_BYTES, AgentServer
from slurm_plugin.server_bounds import (
    AUTHENTICATED, AuthenticatedPools, Bounds, ConnectionSlots, DeadlineWatch, PoolBounds, RefusalCounter,
)
from tests.unit.agent.as_user import as_nobody

SMALL = Bounds(max_total=6, max_per_key=2, reserved=2, request_s=0.6, idle_s=0.6)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")


def test_slots_cap_all_and_per_key_and_keep_some_for_privileged_callers():
    slots = ConnectionSlots(SMALL)
    assert slots.acquire(1000) is None and slots.acquire(1000) is None
    assert "2 connections of 1000" in slots.acquire(1000)
    assert slots.acquire(1001) is None and slots.acquire(1001) is None
    assert "kept for root" in slots.acquire(1002)  # 4 of 6 taken: the last 2 are root's
    assert slots.acquire(0, privileged=True) is None and slots.acquire(0, privileged=True) is None
    assert "6 connections open" in slots.acquire(0, privileged=True)
    slots.release(1000)
    assert slots.total == 5 and slots.of(1000) == 1
    slots.release(4242)  # never held: nothing changes
    assert slots.total == 5


def test_pools_evict_the_oldest_unauthenticated_connection_never_an_authenticated_one():
    pools = AuthenticatedPools(PoolBounds(max_unauthenticated=3, max_unauthenticated_per_key=2, max_authenticated=1,
                                          head_s=1.0, request_s=1.0, idle_s=1.0))
    socks = [object() for _ in range(9)]
    a1, none = pools.admit("a", socks[0])
    a2, _ = pools.admit("a", socks[1])
    assert none == [] and pools.verifying(a1) and pools.authenticated(a1)  # a1 leaves the unauthenticated pool
    a3, evicted = pools.admit("a", socks[2])
    assert evicted == [] and pools.count() == 3  # a's unauthenticated: a2, a3
    a4, evicted = pools.admit("a", socks[3])  # a at its share: its oldest goes
    assert evicted == [socks[1]] and pools.evicted(a2) and not pools.verifying(a2)
    b1, _ = pools.admit("b", socks[4])  # a3, a4, b1: the unauthenticated pool is full
    assert pools.verifying(a3)  # being verified: evicted only when no new one is left
    b2, evicted = pools.admit("b", socks[5])
    assert evicted == [socks[3]]  # the oldest NEW one (a4), not a3, never the authenticated a1
    assert pools.verifying(b1) and pools.verifying(b2)
    c1, evicted = pools.admit("c", socks[6])  # all being verified: b holds the most, its oldest goes
    assert evicted == [socks[4]] and not pools.verifying(b1) and pools.verifying(a3)
    assert not pools.authenticated(a3)  # the authenticated pool (1) is full: a3 is served, not kept
    pools.refused(b2)  # refused: evicted first again
    _, evicted = pools.admit("c", socks[7])  # a, b and c hold one each: the oldest NEW one of all (b2)
    assert evicted == [socks[5]]
    pools.release(a1)
    assert pools.count(AUTHENTICATED) == 0 and pools.authenticated(a3)
    pools.release(a2)  # evicted long ago: nothing changes
    assert pools.count() == 3 and pools.count(AUTHENTICATED) == 1  # a3; c1 and the last one


def test_a_full_pool_evicts_from_the_address_holding_the_most_never_a_lone_newcomer():
    pools = AuthenticatedPools(PoolBounds(max_unauthenticated=4, max_unauthenticated_per_key=3, max_authenticated=1,
                                          head_s=1.0, request_s=1.0, idle_s=1.0))
    helper, _ = pools.admit("helper", "helper-conn")  # the helper's new connection, its head not read yet
    for i in range(3):
        pools.admit("flood-1" if i % 2 else "flood-2", f"flood-{i}")
    for i in range(3, 40):  # a flood from two other addresses, each new one evicting an older one
        _, evicted = pools.admit("flood-1" if i % 2 else "flood-2", f"flood-{i}")
        assert evicted and all(str(s).startswith("flood-") for s in evicted), evicted
    assert pools.verifying(helper) and pools.authenticated(helper)  # never evicted: served
def test_a_deadline_ends_a_blocked_read():
    a, b = socket.socketpair()
    watch = DeadlineWatch("test")
    t0 = time.monotonic()
    watch.arm(a, 0.2)
    assert a.recv(10) == b"" and 0.15 < time.monotonic() - t0 < 2.0
    c, d = socket.socketpair()
    kept = watch.arm(c, 0.1)
    watch.disarm(kept)
    time.sleep(0.3)
    c.setblocking(False)
    with pytest.raises(BlockingIOError):
        c.recv(10)  # still open: disarmed
    assert watch.expired == 1
    e, f = socket.socketpair()
    cut = watch.arm(e, 0.05)
    assert e.recv(10) == b"" and watch.fired(cut) and not watch.fired(kept)
    watch.disarm(cut)
    assert not watch.fired(cut)


def test_a_flood_of_refusals_costs_a_bounded_number_of_log_lines(caplog):
    now = [0.0]
    counter = RefusalCounter(logging.getLogger("t"), "agent socket", every_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="t"):
        for i in range(1000):
            now[0] = i * 0.01  # 1,000 refusals in 10 s
            counter.refused("busy", f"uid 65534 pid {i}")
        now[0] = 10.5
        counter.refused("busy", "uid 65534")
    assert len(caplog.records) == 2 and "1000 such refusals" in caplog.records[1].getMessage()
    assert counter.counts["busy"] == 1001


@pytest.fixture
def served(tmp_path):
    agent = NodeAgent("node1", tmp_path, SimGpuBackend(None, "node1", gpus=["H100-80GB"]))
    sockdir = tempfile.mkdtemp(prefix="gp-bounds-")  # reachable by user nobody
    os.chmod(sockdir, 0o755)
    server = AgentServer(os.path.join(sockdir, "agent-node1.sock"), agent, {0}, bounds=SMALL)
    server.serve_in_thread()
    yield server
    server.shutdown()
    server.server_close()
    os.rmdir(sockdir)


def _closed_at_once(sock: socket.socket, within: float = 0.2) -> bool:
    ready, _, _ = select.select([sock], [], [], within)
    return bool(ready) and sock.recv(10) == b""


@needs_root
def test_one_user_holds_at_most_its_share_and_root_still_gets_in(served):
    path = str(served.socket_path)
    held: list[socket.socket] = []
    root_answer: list[bytes] = []

    def flood():
        socks = []
        for _ in range(5):
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            socks.append(s)
        time.sleep(0.1)
        refused = sum(_closed_at_once(s, 0.05) for s in socks)
        t0 = time.monotonic()
        ended = [_closed_at_once(s, 2.0) for s in socks]  # the held ones end at their deadline, unanswered
        return refused, round(time.monotonic() - t0, 2), sum(ended)

    def root_asks():
        time.sleep(0.05)
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(2)
            s.connect(path)
            s.sendall(b'{"op":"ping"}\n')
            root_answer.append(s.recv(1000))

    t = threading.Thread(target=root_asks)
    t.start()
    out = as_nobody(flood)
    t.join()
    refused, waited, ended = eval(out)
    assert refused == 3, out  # 2 per uid
    assert waited < 1.5 and ended == 5, out  # idle connections closed at the deadline
    assert b'"status": "ok"' in root_answer[0]
    assert served.slots.total == 0 and not held


@needs_root
def test_a_trickling_request_is_cut_at_one_deadline_not_per_read(served):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(served.socket_path))
        t0 = time.monotonic()
        try:
            for _ in range(40):  # a byte every 0.1 s: each read is fast, the request never ends
                s.sendall(b" ")
                time.sleep(0.1)
        except OSError:
            pass
        cut = time.monotonic() - t0
    assert cut < 1.5, cut  # SMALL.request_s = 0.6; a per-read timeout would have waited 4 s


@needs_root
def test_an_unprivileged_request_is_read_no_further_than_a_small_limit(served):
    path = str(served.socket_path)

    def big():
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(2)
            s.connect(path)
            try:
                s.sendall(b'{"op":"report","pad":"' + b"x" * (MAX_OPEN_REQUEST_BYTES * 8))
            except OSError:
                pass
            return s.recv(1000).decode()

    out = as_nobody(big)
    assert "request too large" in out, out
