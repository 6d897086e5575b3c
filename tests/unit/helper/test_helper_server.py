"""The helper's socket server: kept connections, split and pipelined requests, work after
the answer, and the ways a connection ends."""
import os
import socket
import threading
import time

import pytest

from slurm_plugin.helper import server as server_mod
from slurm_plugin.helper.protocol import decode_response, encode_request
from slurm_plugin.helper.server import HelperServer, Reply


def _read_lines(sock: socket.socket, count: int = 1) -> list[dict[str, str]]:
    data = b""
    while data.count(b"\n") < count:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return [decode_response(line) for line in data.splitlines(keepends=True)]


def _read_line(sock: socket.socket) -> dict[str, str]:
    lines = _read_lines(sock)
    assert len(lines) <= 1, lines
    return lines[0] if lines else {}


@pytest.fixture
def serving(tmp_path):
    events: list[str] = []

    def echo(fields):
        events.append("answer " + fields.get("n", b"").decode())
        return {"status": "ok", "n": fields.get("n", b"").decode()}

    def later(fields):
        events.append("decide")
        return Reply({"status": "ok"}, after=lambda: events.append("after"))

    path = tmp_path / "helper.sock"
    srv = HelperServer(path, {"echo": echo, "later": later}, {os.getuid()})
    srv.serve_in_thread()
    yield srv, path, events
    srv.shutdown()
    srv.server_close()


def _connect(path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(str(path))
    return sock


def test_one_connection_carries_many_requests_in_order(serving):
    srv, path, _ = serving
    with _connect(path) as sock:
        for n in range(5):
            sock.sendall(encode_request({"op": "echo", "n": str(n)}))
            assert _read_line(sock) == {"status": "ok", "n": str(n)}
        # two requests in one write are both answered, in order
        sock.sendall(encode_request({"op": "echo", "n": "a"}) + encode_request({"op": "echo", "n": "b"}))
        assert [answer["n"] for answer in _read_lines(sock, 2)] == ["a", "b"]
    assert len(srv._connections) <= 1  # the closed one is let go at its EOF


def test_a_request_split_across_writes_is_put_together(serving):
    _, path, _ = serving
    data = encode_request({"op": "echo", "n": "7", "script": b"x" * 300_000})
    with _connect(path) as sock:
        for i in range(0, len(data), 70_000):
            sock.sendall(data[i : i + 70_000])
            time.sleep(0.01)
        assert _read_line(sock)["n"] == "7"


def test_after_runs_once_the_answer_is_sent(serving):
    _, path, events = serving
    with _connect(path) as sock:
        sock.sendall(encode_request({"op": "later"}))
        assert _read_line(sock) == {"status": "ok"}
    deadline = time.time() + 5
    while "after" not in events and time.time() < deadline:
        time.sleep(0.01)
    assert events == ["decide", "after"]


def test_garbage_is_answered_and_the_connection_closed_but_others_go_on(serving):
    _, path, _ = serving
    with _connect(path) as good, _connect(path) as bad:
        bad.sendall(b"NOT A REQUEST\n")
        assert _read_line(bad)["reason"] == "bad-request"
        assert bad.recv(10) == b""  # closed by the helper
        good.sendall(encode_request({"op": "echo", "n": "1"}))
        assert _read_line(good)["n"] == "1"


def test_a_stalled_half_request_costs_the_others_at_most_the_read_timeout(serving, monkeypatch):
    monkeypatch.setattr(server_mod, "READ_TIMEOUT_S", 0.2)
    _, path, _ = serving
    with _connect(path) as staller, _connect(path) as other:
        staller.sendall(encode_request({"op": "echo", "n": "1"})[:15])
        time.sleep(0.05)
        started = time.monotonic()
        other.sendall(encode_request({"op": "echo", "n": "2"}))
        assert _read_line(other)["n"] == "2"
        assert time.monotonic() - started < 2.0
        assert _read_line(staller)["reason"] == "bad-request"


def test_too_many_connections_are_refused_with_an_answer(serving, monkeypatch):
    monkeypatch.setattr(server_mod, "MAX_CONNECTIONS", 2)
    _, path, _ = serving
    with _connect(path) as a, _connect(path) as b:
        for sock in (a, b):  # make sure both are registered before the third arrives
            sock.sendall(encode_request({"op": "echo", "n": "x"}))
            assert _read_line(sock)["n"] == "x"
        with _connect(path) as c:
            assert _read_line(c)["reason"] == "busy"


def test_shutdown_closes_kept_connections(tmp_path):
    path = tmp_path / "h.sock"
    srv = HelperServer(path, {"echo": lambda f: {"status": "ok"}}, {os.getuid()})
    srv.serve_in_thread()
    sock = _connect(path)
    sock.sendall(encode_request({"op": "echo"}))
    assert _read_line(sock) == {"status": "ok"}
    stopper = threading.Thread(target=srv.shutdown)
    stopper.start()
    stopper.join(5)
    assert not stopper.is_alive()
    assert sock.recv(10) == b""
    srv.server_close()
    assert not path.exists()
    sock.close()


# -- issue 33, item 5: the helper's loop never waits on one client -----------------------------------
def test_a_stalled_half_request_does_not_hold_up_the_others_at_all(serving, monkeypatch):
    """Before: the loop waited READ_TIMEOUT_S (0.5 s) on the staller before it served anyone else."""
    monkeypatch.setattr(server_mod, "READ_TIMEOUT_S", 1.0)
    _, path, _ = serving
    with _connect(path) as staller, _connect(path) as other:
        staller.sendall(encode_request({"op": "echo", "n": "1"})[:15])
        time.sleep(0.05)
        started = time.monotonic()
        other.sendall(encode_request({"op": "echo", "n": "2"}))
        assert _read_line(other)["n"] == "2"
        assert time.monotonic() - started < 0.3
        t0 = time.monotonic()
        assert _read_line(staller)["reason"] == "bad-request"  # refused at its own deadline
        assert time.monotonic() - t0 < 2.0


def test_a_trickled_request_is_refused_at_one_deadline_from_its_first_byte(serving, monkeypatch):
    monkeypatch.setattr(server_mod, "READ_TIMEOUT_S", 0.4)
    _, path, _ = serving
    request = encode_request({"op": "echo", "n": "1" * 200})
    with _connect(path) as sock:
        t0 = time.monotonic()
        try:
            for i in range(len(request) - 1):  # a byte every 20 ms: never idle, never whole in time
                sock.sendall(request[i:i + 1])
                time.sleep(0.02)
        except OSError:
            pass
        assert _read_line(sock)["reason"] == "bad-request" and time.monotonic() - t0 < 2.0


def test_an_idle_kept_connection_is_closed(serving, monkeypatch):
    """Before: idle privileged connections were never closed (63 idle ones made the 64th "busy")."""
    monkeypatch.setattr(server_mod, "IDLE_S", 0.3)
    _, path, _ = serving
    with _connect(path) as sock:
        sock.sendall(encode_request({"op": "echo", "n": "x"}))
        assert _read_line(sock)["n"] == "x"
        sock.settimeout(3)
        t0 = time.monotonic()
        assert sock.recv(10) == b"" and time.monotonic() - t0 < 2.0


def test_one_uid_holds_at_most_its_share_of_connections(serving, monkeypatch):
    monkeypatch.setattr(server_mod, "MAX_PER_UID", 2)
    _, path, _ = serving
    with _connect(path) as a, _connect(path) as b:
        for sock in (a, b):
            sock.sendall(encode_request({"op": "echo", "n": "x"}))
            assert _read_line(sock)["n"] == "x"
        with _connect(path) as c:
            assert _read_line(c)["reason"] == "busy"


def test_the_rate_limit_counts_each_submitter_not_slurmctlds_one_uid(tmp_path):
    """Before: one bucket for slurmctld's uid, so one user's flood of submissions spent every
    other user's budget."""
    from slurm_plugin.refusals import UserLimits

    path = tmp_path / "h.sock"
    srv = HelperServer(path, {"submit": lambda f: {"status": "ok"}}, {os.getuid()},
                       limits=UserLimits(rate=0.001, burst=3))
    srv.serve_in_thread()
    try:
        with _connect(path) as sock:
            answers = []
            for _ in range(5):
                sock.sendall(encode_request({"op": "submit", "uid": "1000"}))
                answers.append(_read_line(sock).get("reason"))
            assert answers == [None, None, None, "rate-limited", "rate-limited"]
            sock.sendall(encode_request({"op": "submit", "uid": "1001"}))
            assert _read_line(sock) == {"status": "ok"}
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_second_server_does_not_take_a_live_servers_socket(serving, tmp_path):
    """Binding where a running helper listens is refused: replacing the file would cut the
    running one off from slurmctld's shim (a tool built on a live cluster's settings did)."""
    from slurm_plugin.unix_socket import SocketInUse

    srv, path, _ = serving
    with pytest.raises(SocketInUse, match="stop it first"):
        HelperServer(path, {}, {os.getuid()})
    sock = _connect(path)  # the running server still answers at its path
    sock.sendall(encode_request({"op": "echo", "n": "1"}))
    assert _read_line(sock) == {"status": "ok", "n": "1"}
    sock.close()


def test_a_stale_socket_file_is_replaced(tmp_path):
    path = tmp_path / "stale.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))  # bound, never listening, then gone: the file of a killed server
    dead.close()
    assert path.is_socket()
    srv = HelperServer(path, {"echo": lambda f: {"status": "ok"}}, {os.getuid()})
    srv.serve_in_thread()
    try:
        sock = _connect(path)
        sock.sendall(encode_request({"op": "echo"}))
        assert _read_line(sock) == {"status": "ok"}
        sock.close()
    finally:
        srv.shutdown()
        srv.server_close()
