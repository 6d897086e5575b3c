"""Answers on the agent's Unix socket are framed (issue 33, item 4): the plain-text answer ends
with its END line, a JSON answer is one whole line; anything else is a refusal on the client's side
(the SPANK plugin's twin is tests/unit/agent/test_spank_task_hooks.py)."""
from __future__ import annotations

import socket
import threading

import pytest

from slurm_plugin.agent import isolation as iso
from slurm_plugin.agent.client import AgentUnavailable, ask


def _serve_once(path, answer: bytes):
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen(1)

    def run():
        conn, _ = srv.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(answer)
        srv.close()

    threading.Thread(target=run, daemon=True).start()


@pytest.mark.parametrize("answer", [b'{"status": "ok"}', b'{"status": "ok", "summ', b'{"status": "ok"}\n{"x": 1}\n', b""])
def test_an_answer_that_is_not_one_whole_line_is_refused(tmp_path, answer):
    _serve_once(tmp_path / "a.sock", answer)
    with pytest.raises(AgentUnavailable, match="no whole answer"):
        ask(tmp_path / "a.sock", {"op": "ping"})


def test_a_whole_line_is_taken(tmp_path):
    _serve_once(tmp_path / "a.sock", b'{"status": "ok", "node": "n1"}\n')
    assert ask(tmp_path / "a.sock", {"op": "ping"}) == {"status": "ok", "node": "n1"}


def test_every_plain_text_answer_ends_with_its_end_line():
    fence = {"allowed": ["nvidia-cap21"], "directory": "/dev/nvidia-caps", "caps_major": 235, "deny": [[22, 30]]}
    text = iso.answer_lines("mig:1g.10gb@0", {"CUDA_VISIBLE_DEVICES": "MIG-x"}, fence)
    assert text.endswith("\nEND\n") and text.count("END\n") == 1
    assert iso.error_line("no room").endswith("\nEND\n")
    with pytest.raises(ValueError):
        iso.answer_lines("x", {"END": "1"})


def test_a_refusal_the_step_caused_is_marked():
    assert iso.error_line("its step names GPU [1]", step_caused=True) == "ERR-STEP its step names GPU [1]\nEND\n"


def test_the_socket_marks_a_refusal_the_step_caused(tmp_path):
    import os
    import tempfile

    from gpus.sim.backend import SimGpuBackend
    from slurm_plugin.agent.daemon import NodeAgent
    from slurm_plugin.agent.server import AgentServer
    from slurm_plugin.agent.state import BATCH_STEP

    agent = NodeAgent("node1", tmp_path, SimGpuBackend(None, "node1", gpus=["H100-80GB", "H100-80GB"],
                                                       mig_enabled=False), isolation_mode="mps")
    agent.isolate(7, BATCH_STEP, 0, {"SLURM_JOB_GPUS": "0", "SLURM_SHARDS_ON_NODE": "1"})
    sockdir = tempfile.mkdtemp(prefix="gp-framing-")
    server = AgentServer(os.path.join(sockdir, "agent-node1.sock"), agent, {0})
    server.serve_in_thread()
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(server.socket_path))
            s.sendall(b'{"op":"isolate","format":"lines","job_id":7,"step_id":0,"uid":0,"node":"node1",'
                      b'"env":{"SLURM_STEP_GPUS":"1","SLURM_SHARDS_ON_NODE":"1"}}\n')
            text = s.makefile().read()
    finally:
        server.shutdown()
        server.server_close()
        os.rmdir(sockdir)
    assert text.startswith("ERR-STEP ") and text.endswith("\nEND\n"), text
