import os
import socket

import pytest
from hypothesis import given, strategies as st

from packer.config import GIB, PackerConfig
from packer.decision import ClusterView
from packer.fingerprint import fingerprint
from store.db import RunRecord, Store
from slurm_plugin.helper.cluster_view import NodeGpus, Snapshot, idle_gpus
from slurm_plugin.helper.protocol import (
    ProtocolError, decode_request, decode_response, encode_request, encode_response, request_complete,
)
from slurm_plugin.helper.server import HelperServer, ask
from slurm_plugin.helper.submit_service import SubmitService
from fixed_view import FixedView


@given(st.dictionaries(st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True), st.binary(max_size=300), max_size=10))
def test_request_round_trip(fields):
    data = encode_request(fields)
    assert request_complete(data)
    assert decode_request(data) == fields
    if len(data) > 12:
        assert not request_complete(data[:-4]) or data[:-4].endswith(b"END\n") is False


@pytest.mark.parametrize("data", [b"", b"HELLO\n", b"GPUPACK/1\nname 99\nshort\nEND\n", b"GPUPACK/1\nbad header\n", b"GPUPACK/1\nname 1\nxyEND\n"])
def test_malformed_requests_are_refused(data):
    with pytest.raises(ProtocolError):
        decode_request(data)


def test_response_round_trip_and_refuses_tabs():
    assert decode_response(encode_response({"a": "1 2", "b": ""})) == {"a": "1 2", "b": ""}
    with pytest.raises(ValueError):
        encode_response({"a": "x\ty"})


def service(store, idle=0, mode="enforce", kill=None):
    cfg = PackerConfig(mode=mode)
    return SubmitService(lambda: cfg, store, FixedView(ClusterView(idle)), kill)


def test_service_packs_a_known_job_and_rewrites_in_its_dialect():
    store = Store()
    body = b"#!/bin/sh\ntrain\n"
    store.record_run(RunRecord(1, fingerprint("alice", "t", body), int(7.6 * GIB), 35.0))
    answer = service(store).answer({"user_name": b"alice", "name": b"t", "script": body, "tres_per_job": b"gres/gpu:1"})
    assert (answer.verdict, answer.rewrite, answer.clear_field) == ("packed", "gres/shard:1", "tres_per_job")
    assert answer.admin_comment.startswith("gpupack: packed shard:1 est=7.6GiB")


def test_service_modes_and_kill_switch(tmp_path):
    store = Store()
    store.record_run(RunRecord(1, fingerprint("alice", "t", b""), GIB, 10.0))
    fields = {"user_name": b"alice", "name": b"t", "tres_per_node": b"gres:gpu:1"}
    observe = service(store, mode="observe").answer(fields)
    assert observe.verdict == "packed" and observe.admin_comment == "" and observe.rewrite == ""
    advise = service(store, mode="advise").answer(fields)
    assert advise.admin_comment.startswith("gpupack: advise packed") and advise.rewrite == ""
    kill = tmp_path / "off"
    kill.touch()
    assert service(store, kill=kill).answer(fields).reason == "kill-switch"


def test_service_survives_garbage_fields():
    answer = service(Store()).answer({"tres_per_node": b"\xff\xfe", "min_nodes": b"many", "uid": b"x"})
    assert answer.verdict == "untouched"


def test_server_answers_and_survives_bad_requests(tmp_path):
    path = tmp_path / "helper.sock"
    server = HelperServer(path, {"echo": lambda f: {"status": "ok", "n": str(len(f))}, "boom": lambda f: 1 / 0}, {os.getuid()})
    server.serve_in_thread()
    try:
        assert ask(path, {"op": "echo", "a": b"\x00\n"}) == {"status": "ok", "n": "1"}
        assert ask(path, {"op": "boom"})["reason"] == "helper-error"
        assert ask(path, {"op": "nope"})["reason"] == "unknown-op"
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(path))
            s.sendall(b"rubbish that is not a request at all\n")
            assert b"bad-request" in s.recv(1000)
        assert ask(path, {"op": "echo"})["status"] == "ok"
    finally:
        server.shutdown()
        server.server_close()


def test_cluster_view_counts_idle_gpus_and_reservations():
    snap = Snapshot(
        nodes=(
            NodeGpus("n1", frozenset({"MIXED"}), 2, frozenset({0})),
            NodeGpus("n2", frozenset({"IDLE", "DRAIN"}), 2),
            NodeGpus("n3", frozenset({"IDLE"}), 2),
        ),
        pending_whole_gpu_jobs=1,
        taken_at=0.0,
    )
    assert idle_gpus(snap) == 2
    assert idle_gpus(snap, reservations=5) == 0


def test_only_a_slow_decision_is_logged_above_debug(caplog, monkeypatch):
    import logging
    import time as _time

    from slurm_plugin.helper import submit_service

    fields = {"user_name": b"alice", "name": b"t", "tres_per_node": b"gres:gpu:1"}
    fast = service(Store())
    mine = lambda: [r for r in caplog.records if r.name == "slurm_plugin.helper.submit_service"]  # noqa: E731
    # a fast decision, judged against a threshold no loaded machine reaches (22 ms seen at load 18)
    monkeypatch.setattr(submit_service, "SLOW_DECISION_MS", 10_000.0)
    with caplog.at_level(logging.INFO, logger="slurm_plugin.helper.submit_service"):
        answer, log_it = fast.respond(fields)
        log_it()
    assert answer.verdict == "exclusive" and not mine()
    monkeypatch.undo()
    cfg = PackerConfig()
    slow = SubmitService(lambda: cfg, Store(), FixedView(lambda: (_time.sleep(0.006), ClusterView(0))[1]))
    with caplog.at_level(logging.INFO, logger="slurm_plugin.helper.submit_service"):
        slow.respond(fields)[1]()
    assert [r.levelname for r in mine()] == ["WARNING"]
    assert "decision user=alice verdict=exclusive" in mine()[0].getMessage()
