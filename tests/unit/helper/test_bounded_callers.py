"""Bounded for every caller: refusals on the helper's socket are counted and their log lines
rate-limited; each user's requests are limited."""
from __future__ import annotations

import logging
import os
import socket

import pytest
from prometheus_client import CollectorRegistry

from slurm_plugin.helper import server as server_mod
from slurm_plugin.helper.protocol import decode_response, encode_request
from slurm_plugin.helper.server import HelperServer
from slurm_plugin.refusals import MAX_BUCKETS, RefusalLog, UserLimits

NOBODY = 65534


def _ask(path, fields) -> dict[str, str]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(str(path))
        try:
            sock.sendall(encode_request(fields))
        except OSError:
            pass
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    return decode_response(data)


@pytest.fixture
def server(tmp_path):
    registry = CollectorRegistry()
    refusals = RefusalLog(logging.getLogger("slurm_plugin.helper.server"), registry, lines_per_min=10)
    srv = HelperServer(tmp_path / "helper.sock", {"ping": lambda f: {"status": "ok"}}, {os.getuid()},
                       refusals=refusals, limits=UserLimits(rate=0.001, burst=5))
    srv.serve_in_thread()
    yield srv, registry
    srv.shutdown()
    srv.server_close()


def test_300_refused_connections_from_nobody_write_a_handful_of_lines(server, monkeypatch, caplog):
    """Seen: 300 refused connections wrote 300 log lines (about 17 GB an hour at worst)."""
    srv, registry = server
    monkeypatch.setattr(server_mod, "peer_uid", lambda sock: NOBODY)
    with caplog.at_level(logging.WARNING, logger="slurm_plugin.helper.server"):
        answers = [_ask(srv.socket_path, {"op": "ping"}) for _ in range(300)]
    assert all(a["reason"] == "forbidden" for a in answers)
    lines = [r for r in caplog.records if "refused (forbidden)" in r.getMessage()]
    assert len(lines) == 10, len(lines)
    assert f"uid {NOBODY}" in lines[0].getMessage() and "only counted" in lines[-1].getMessage()
    assert registry.get_sample_value("gpupack_refused_requests_total", {"reason": "forbidden"}) == 300


def test_held_back_refusals_are_summed_in_the_next_window():
    now = [0.0]
    records: list[str] = []

    class Sink(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("test.refusals")
    logger.addHandler(Sink())
    log = RefusalLog(logger, lines_per_min=2, clock=lambda: now[0])
    for _ in range(7):
        log.refused("bad-request", 1000, "garbage")
    now[0] = 61.0
    log.refused("bad-request", 1000, "garbage")
    assert len(records) == 3 and "and 5 more refused as bad-request in the last 60 s" in records[-1]
    assert log.total == 8


def test_a_user_over_the_request_limit_is_passed_through_and_counted(server):
    srv, registry = server
    answers = [_ask(srv.socket_path, {"op": "ping"}) for _ in range(8)]
    assert [a["status"] for a in answers[:5]] == ["ok"] * 5  # the burst
    assert {a["reason"] for a in answers[5:]} == {"rate-limited"}
    assert registry.get_sample_value("gpupack_refused_requests_total", {"reason": "rate-limited"}) == 3


def test_bad_requests_are_counted(server):
    srv, registry = server
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(str(srv.socket_path))
        sock.sendall(b"\xff\xfe not a request\n")
        assert decode_response(sock.recv(4096))["reason"] == "bad-request"
    assert registry.get_sample_value("gpupack_refused_requests_total", {"reason": "bad-request"}) == 1


def test_the_per_user_buckets_stay_bounded():
    now = [0.0]
    limits = UserLimits(rate=10, burst=10, clock=lambda: now[0])
    for uid in range(MAX_BUCKETS + 50):
        now[0] += 1.0
        assert limits.allow(uid)
    assert len(limits) <= MAX_BUCKETS
