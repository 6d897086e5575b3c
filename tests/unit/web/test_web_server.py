"""The web server for real (a socket on localhost) over the adapter, with Slurm faked
(FakeSlurm, Slurm's JSON) and a real SQLite store; no node agent runs, which the page says."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from packer.config import ConfigError, PackerConfig
from store.db import Store
from slurm_plugin.helper.settings import Paths
from slurm_plugin.slurm.fake import FakeSlurm
from slurm_plugin.slurm.runner import SlurmRunner
from slurm_plugin.web.server import WebServer
from slurm_plugin.web.settings import WebSettings, client_allowed, load_web_settings, networks
from slurm_plugin.web.source import WebSource


@pytest.fixture
def served(tmp_path):
    servers = []

    def start(**settings):
        fake = FakeSlurm()
        fake.submit(job_id=1, name="train<b>", state="RUNNING", nodes="node1", gres="gres:shard:2",
                    gres_detail=["shard:h100:2(IDX:0)"], admin_comment="gpupack: packed shard:2 est=9GiB src=history(3) fp=abc")
        fake.submit(job_id=2, name="wait", state="PENDING", state_reason="Resources", gres="gres:gpu:1",
                    admin_comment="gpupack: exclusive reason=no-history fp=def")
        store = Store(tmp_path / "gpupack.db")
        store.log_event("requeue-contention", "lost 25% of its throughput", 1)
        store.close()
        paths = Paths(database=tmp_path / "gpupack.db", agent_dir=tmp_path)
        ws = WebSettings(port=0, **settings)
        source = WebSource(None, paths, PackerConfig(), ws, runner=SlurmRunner(executor=fake))
        server = WebServer(ws, source)
        server.serve_in_thread()
        servers.append(server)
        return server, fake

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()
        s.source.close()


def get(url: str, headers: dict | None = None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def test_main_page_shows_nodes_jobs_events_and_what_could_not_be_read(served):
    server, _fake = served()
    status, headers, body = get(server.url)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    for text in ('id="node-node1"', 'id="node-node2"', 'data-job="1" data-kind="shard"', "train&lt;b&gt;",
                 "lost 25% of its throughput", "no-history", "node agent of node1 does not answer"):
        assert text in body, text


def test_fragment_answers_304_while_nothing_changed(served):
    server, fake = served(refresh_s=0.001)
    status, headers, body = get(server.url + "fragment/overview")
    assert status == 200 and headers["ETag"] and float(headers["X-Gpupack-Taken-At"]) > 0
    status2, _h, _b = get(server.url + "fragment/overview", {"If-None-Match": headers["ETag"]})
    assert status2 == 304
    fake.jobs[2].state = "RUNNING"
    fake.jobs[2].nodes = "node2"
    fake.jobs[2].gres_detail = ["gpu:h100:1(IDX:1)"]
    status3, h3, body3 = get(server.url + "fragment/overview", {"If-None-Match": headers["ETag"]})
    assert status3 == 200 and h3["ETag"] != headers["ETag"] and 'data-job="2" data-kind="whole"' in body3


def test_fragment_is_gzipped_for_browsers_that_take_it(served):
    import gzip

    server, _fake = served()
    _s, _h, plain = get(server.url + "fragment/overview")
    req = urllib.request.Request(server.url + "fragment/overview", headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(resp.read()).decode() == plain


def test_json_api_and_job_page(served):
    server, _fake = served()
    status, _h, body = get(server.url + "api/overview.json")
    doc = json.loads(body)
    assert status == 200 and [n["name"] for n in doc["nodes"]] == ["node1", "node2"]
    assert doc["pending_total"] == 1 and doc["running"][0]["decision"] == "packed"
    status, _h, page = get(server.url + "job/1")
    assert status == 200 and "packed" in page and "est=9GiB" in page and "lost 25%" in page
    status, _h, body = get(server.url + "api/job/1.json")
    assert status == 200 and json.loads(body)["row"]["shards"] == 2
    status, _h, page = get(server.url + "job/999")
    assert status == 200 and "no longer knows job 999" in page


def test_a_finished_jobs_page_shows_the_curve_stored_at_its_end(served, tmp_path):
    from store.curves import RunCurves
    from packer.curves import CurvePoint, RunCurve

    server, fake = served()
    fake.jobs[1].state = "COMPLETED"
    fake.submit(job_id=3, name="gone", state="FAILED", nodes="node2", admin_comment="gpupack: packed shard:1 fp=abc")
    store = Store(tmp_path / "gpupack.db")
    pts = tuple(CurvePoint(float(t), (4 + t) * 2**30, (4 + t) * 2**30) for t in range(6))
    RunCurves(store).save(RunCurve(job_id=1, fingerprint="abc", started_at=50.0, ended_at=60.0, end_state="COMPLETED",
                                   node="node1", gpu_index=0, isolation="shard:2", shards=2, capacity_bytes=20.0 * 2**30,
                                   capacity_label="shard:2", samples=6, points=pts))
    RunCurves(store).save(RunCurve(job_id=1, fingerprint="abc", started_at=10.0, ended_at=20.0,
                                   end_state="REQUEUED by restart-memory", node="node1", gpu_index=0,
                                   isolation="shard:1", shards=1, capacity_bytes=10.0 * 2**30, capacity_label="shard:1",
                                   samples=3, points=pts[:3]))
    store.close()
    status, _h, page = get(server.url + "job/1")
    assert status == 200 and 'data-source="stored"' in page and 'data-points="6"' in page
    assert "Earlier runs of this job (1)" in page and 'data-end="REQUEUED by restart-memory"' in page
    assert "Stored at the run's end" in page and "peak 9.00 GiB over 5 s" in page
    assert f'data-bytes="{20 * 2**30}"' in page and 'class="forecast"' not in page
    doc = json.loads(get(server.url + "api/job/1.json")[2])
    assert doc["stored"]["end_state"] == "COMPLETED" and len(doc["curve"]) == 6
    status, _h, page = get(server.url + "job/3")
    assert status == 200 and "No memory curve was stored" in page and "memplot" not in page


def test_unknown_paths_and_static_files(served):
    server, _fake = served()
    assert get(server.url + "nope")[0] == 404
    assert get(server.url + "api/job/1")[0] == 404  # the API wants .json
    status, headers, body = get(server.url + "static/live.js")
    assert status == 200 and "javascript" in headers["Content-Type"] and "If-None-Match" in body
    assert get(server.url + "static/../settings.py")[0] == 404


def test_a_client_outside_the_allowed_networks_is_refused(served):
    server, _fake = served(allow=("10.0.0.0/8",))
    status, _h, body = get(server.url)
    assert status == 403 and "127.0.0.1 is not in [web] allow" in body


def test_client_networks():
    allowed = networks(["127.0.0.0/8", "10.1.0.0/16", "::1"])
    assert client_allowed("127.0.0.1", allowed) and client_allowed("10.1.2.3", allowed)
    assert client_allowed("::ffff:10.1.0.9", allowed) and client_allowed("::1", allowed)
    assert not client_allowed("10.2.0.1", allowed) and not client_allowed("fe80::1", allowed)
    assert not client_allowed("not-an-ip", allowed)


def test_settings_from_the_file_and_the_command_line(tmp_path):
    toml = tmp_path / "gpupack.toml"
    toml.write_text('[web]\nport = 8080\nallow = ["10.0.0.0/8"]\nbase_path = "/gpupack/"\n')
    s = load_web_settings(toml)
    assert (s.bind, s.port, s.allow, s.base_path) == ("127.0.0.1", 8080, ("10.0.0.0/8",), "/gpupack/")
    s = load_web_settings(toml, bind="0.0.0.0", port=None, allow=["192.168.0.0/24"])
    assert (s.bind, s.port, s.allow) == ("0.0.0.0", 8080, ("192.168.0.0/24",))
    toml.write_text('[web]\nallow = ["10.0.0.300/8"]\n')
    with pytest.raises(ConfigError, match="10.0.0.300/8"):
        load_web_settings(toml)
    toml.write_text("[web]\nprot = 1\n")
    with pytest.raises(ConfigError, match="unknown \\[web\\] keys \\['prot'\\]"):
        load_web_settings(toml)
