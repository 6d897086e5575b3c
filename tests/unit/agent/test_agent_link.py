"""The helper <-> agent link: every request MUNGE-authenticated by a real (private) munged,
every answer checked. Fakes only where munged cannot produce the case (a forged answer)."""
from __future__ import annotations

import http.client
import json
import os
import subprocess
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent.client import AgentLink, AgentRefused, AgentUnavailable, collect_finals, samples, status
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.directory import AgentAddress
from slurm_plugin.agent.link_server import AgentLinkServer
from slurm_plugin.agent.slurm_jobs import PushedJobs
from slurm_plugin.agent.state import BATCH_STEP
from slurm_plugin.munge_auth import (
    ANSWER_HEADER, HEADER, SCHEME, Claim, Munge, PrivateMunged, RequestVerifier, new_claim, sign_answer,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/sbin/munged").exists(),
                                reason="needs root and munged (Debian: munge) for a private munged")


@pytest.fixture(scope="module")
def munge():
    with PrivateMunged() as daemon:
        yield Munge(daemon.socket)


@pytest.fixture
def agent_server(munge, tmp_path):
    agent = NodeAgent("node1", tmp_path, SimGpuBackend(None, "node1", gpus=["H100-80GB"]),
                      list_running_jobs=PushedJobs())
    agent.isolate(7, BATCH_STEP, 0, {"SLURM_JOB_GPUS": "0", "SLURM_SHARDS_ON_NODE": "1"})
    agent.tick()
    server = AgentLinkServer(("127.0.0.1", 0), agent, RequestVerifier(munge, "node1", {0}, max_age_s=60))
    server.serve_in_thread()
    yield server
    server.shutdown()
    server.server_close()


def link_to(server, munge, node="node1") -> AgentLink:
    address = AgentAddress("127.0.0.1", server.server_address[1])
    return AgentLink(lambda n: address, munge, {0}, timeout=5.0)


def post(server, path: str, body: bytes, headers: dict) -> tuple[int, dict, str | None]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
    conn.request("POST", path, body, headers)
    resp = conn.getresponse()
    out = resp.status, json.loads(resp.read()), resp.getheader(ANSWER_HEADER)
    conn.close()
    return out


def credential(munge, claim: Claim, ttl: int | None = None) -> dict:
    return {HEADER: SCHEME + munge.encode(claim.encode(), ttl)}


def test_samples_reach_the_helper_over_the_authenticated_link(agent_server, munge):
    link = link_to(agent_server, munge)
    (sample,) = samples(link, "node1", latest=True)
    assert sample.job_id == 7 and sample.node == "node1"
    assert status(link, "node1")["jobs"]["7"]["gpu_index"] == 0
    assert collect_finals(link, "node1") == []


def test_a_request_without_a_credential_is_refused_on_every_command_path(agent_server):
    for path in ("/v1/samples", "/v1/status", "/v1/jobs", "/v1/nothing", "/"):
        code, answer, signature = post(agent_server, path, b"{}", {})
        assert code == 401 and "no MUNGE credential" in answer["reason"] and signature is None, path
    code, _, _ = post(agent_server, "/v1/samples", b"{}", {HEADER: SCHEME + "MUNGE:garbage:"})
    assert code == 401


def test_a_replayed_request_is_refused(agent_server, munge):
    body = b'{"latest": true}'
    headers = credential(munge, new_claim("node1", "POST", "/v1/samples", body))
    assert post(agent_server, "/v1/samples", body, headers)[0] == 200
    code, answer, _ = post(agent_server, "/v1/samples", body, headers)  # captured and sent again
    assert code == 401 and "replayed" in answer["reason"].lower()


def test_a_fresh_credential_reusing_a_seen_nonce_is_refused(agent_server, munge):
    body = b"{}"
    claim = new_claim("node1", "POST", "/v1/status", body)
    assert post(agent_server, "/v1/status", body, credential(munge, claim))[0] == 200
    code, answer, _ = post(agent_server, "/v1/status", body, credential(munge, claim))  # new credential, same claim
    assert code == 401 and "nonce was seen" in answer["reason"]


def test_an_expired_credential_is_refused(agent_server, munge):
    body = b"{}"
    old = Claim("node1", "POST", "/v1/status", new_claim("x", "", "", body).body_sha256, "n-old", time.time() - 120)
    code, answer, _ = post(agent_server, "/v1/status", body, credential(munge, old))
    assert code == 401 and "expired" in answer["reason"]
    headers = credential(munge, new_claim("node1", "POST", "/v1/status", body), ttl=1)
    time.sleep(2.2)  # munged's own TTL
    code, answer, _ = post(agent_server, "/v1/status", body, headers)
    assert code == 401 and "expired" in answer["reason"].lower()


def test_a_credential_made_for_another_node_is_refused(agent_server, munge):
    body = b"{}"
    code, answer, _ = post(agent_server, "/v1/status", body, credential(munge, new_claim("node2", "POST", "/v1/status", body)))
    assert code == 403 and "node2" in answer["reason"]


def test_a_credential_for_another_path_or_a_tampered_body_is_refused(agent_server, munge):
    body = b'{"job_ids": [], "generation": 1}'
    headers = credential(munge, new_claim("node1", "POST", "/v1/jobs", body))
    code, answer, _ = post(agent_server, "/v1/jobs", b'{"job_ids": [], "generation": 9}', headers)
    assert code == 401 and "tampered" in answer["reason"]
    headers = credential(munge, new_claim("node1", "POST", "/v1/status", b"{}"))
    code, answer, _ = post(agent_server, "/v1/finals", b"{}", headers)
    assert code == 401 and "/v1/status" in answer["reason"]


def test_a_non_root_caller_is_refused(agent_server, munge):
    body = b"{}"
    claim = new_claim("node1", "POST", "/v1/status", body)
    made = subprocess.run(["runuser", "-u", "nobody", "--", "munge", "-S", str(munge.socket)],
                          input=claim.encode(), capture_output=True, check=True)
    code, answer, _ = post(agent_server, "/v1/status", body, {HEADER: SCHEME + made.stdout.decode().strip()})
    assert code == 403 and "uid 65534" in answer["reason"]


def test_the_agent_signs_its_answers_for_the_request_and_the_helper_checks(agent_server, munge):
    link = link_to(agent_server, munge)
    assert status(link, "node1")["node"] == "node1"  # a real answer passes check_answer

    class Forger(BaseHTTPRequestHandler):
        """Binds the agent's port while it restarts and answers as it would."""

        signature: str | None = None

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"status": "ok", "node": "node1", "samples": [], "now": 1.0}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            if Forger.signature:
                self.send_header(ANSWER_HEADER, Forger.signature)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    fake = ThreadingHTTPServer(("127.0.0.1", 0), Forger)
    import threading

    threading.Thread(target=fake.serve_forever, daemon=True).start()
    try:
        forged = link_to(fake, munge)
        with pytest.raises(AgentUnavailable, match="no MUNGE credential"):
            samples(forged, "node1")
        # a replayed genuine answer credential: for another request's nonce
        Forger.signature = sign_answer(munge, new_claim("node1", "POST", "/v1/samples", b"{}"), b"whatever")
        with pytest.raises(AgentUnavailable, match="not this request"):
            samples(forged, "node1")
        # signed by a local user who is not root: refused
        made = subprocess.run(["runuser", "-u", "nobody", "--", "munge", "-S", str(munge.socket)],
                              input=b"{}", capture_output=True, check=True)
        Forger.signature = SCHEME + made.stdout.decode().strip()
        with pytest.raises(AgentUnavailable, match="uid 65534"):
            samples(forged, "node1")
    finally:
        fake.shutdown()
        fake.server_close()


def test_a_refusal_is_reported_as_such(agent_server, munge):
    wrong = AgentLink(lambda n: AgentAddress("127.0.0.1", agent_server.server_address[1]), munge, {0})
    # the directory sent node2's request to node1's agent: its 403 is unsigned (it made no answer
    # credential for a request it did not accept), so a link failure, never a refusal (issue 33)
    with pytest.raises(AgentUnavailable, match="unsigned 403.*node2"):
        status(wrong, "node2")
    with pytest.raises(AgentRefused, match="older"):
        wrong.call("node1", "jobs", {"job_ids": [], "generation": 5})
        wrong.call("node1", "jobs", {"job_ids": [], "generation": 4})
