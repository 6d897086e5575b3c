"""Every daemon of the real cluster serves Prometheus metrics at the URL `devcluster status`
gives: scraped after a submission, parsed with prometheus_client's own parser."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.integration


def status_rows(cluster) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "slurm_plugin", "devcluster", "status", "--json",
                          "--state-dir", str(cluster.spec.state_dir)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return json.loads(out)


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as reply:
        assert reply.headers.get("Content-Type", "").startswith("text/plain")
        text = reply.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(families: dict, name: str, **labels) -> float:
    family = name.removesuffix("_total").removesuffix("_count")
    values = [s.value for s in families[family].samples
              if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert values, (name, labels)
    return sum(values)


def test_every_daemon_serves_gpupack_metrics_and_the_submit_histogram_counts_a_submission(cluster):
    cluster.dev.up()  # an earlier test may have restarted the helper
    rows = status_rows(cluster)
    urls = {(r["role"], r["name"]): r["metrics_url"] for r in rows if r["role"] in ("helper", "watcher", "agent")}
    # the helper's on the controller's loopback; an agent's on its node's address (multi-host)
    hosts = {key: cluster.spec.node_address(key[1]) if key[0] == "agent" else "127.0.0.1" for key in urls}
    assert len(urls) == 2 + cluster.spec.nodes and all(u.startswith(f"http://{hosts[k]}:") for k, u in urls.items())
    assert len(set(urls.values())) == len(urls)  # one endpoint per daemon
    assert all(not r["metrics_url"] for r in rows if r["role"] in ("munged", "slurmctld", "slurmd"))

    before = sample(scrape(urls[("helper", "helper")]), "gpupack_submit_decision_seconds_count")
    job = cluster.submit(["--gres=gpu:1", "-t", "5"], b"#!/bin/sh\nsleep 60\n")
    try:
        cluster.wait(job, "RUNNING", timeout=60)
        submit = scrape(urls[("helper", "helper")])
        assert sample(submit, "gpupack_submit_decision_seconds_count") >= before + 1
        assert submit["gpupack_submit_decision_seconds"].type == "histogram"
        assert sample(submit, "gpupack_decisions_total") >= 1
        assert 0 <= sample(submit, "gpupack_cluster_view_age_seconds") < 30
        assert sample(submit, "gpupack_mode", mode="enforce") == 1

        deadline = time.time() + 60  # a round can take seconds on a busy host (and waits after it)
        while True:
            watcher = scrape(urls[("watcher", "helper")])
            if sample(watcher, "gpupack_monitor_rounds_total") > 0 or time.time() > deadline:
                break
            time.sleep(1)
        assert sample(watcher, "gpupack_monitor_rounds_total") > 0
        for family in ("gpupack_requeues", "gpupack_restarts", "gpupack_actions", "gpupack_mig_layout_changes"):
            assert family in watcher, family

        node = cluster.job(job)["NodeList"]
        held = 0.0
        deadline = time.time() + 20  # the agent isolates the job when its first step starts
        while time.time() < deadline and not held:
            families = {name: scrape(url) for (role, name), url in urls.items() if role == "agent"}
            held = sample(families[node], "gpupack_gpu_jobs", node=node)
            time.sleep(0.5)
        assert held == 1, f"the agent of {node} shows no job on its GPUs"
        assert sample(families[node], "gpupack_node_jobs", node=node, isolation="whole") == 1
        assert sample(families[node], "gpupack_gpu_shares_in_use", node=node) == 5  # a whole H100: its 5 shares (its share ladder)
        for name, agent in families.items():
            assert all(s.labels["node"] == name for s in agent["gpupack_gpu_shares"].samples)
            assert len(agent["gpupack_gpu_shares"].samples) == cluster.spec.gpus_per_node

        # a job on two shares runs in a MIG slice of two memory slices: its GPU shows both
        shared = cluster.submit(["--gres=shard:2", "-t", "5"], b"#!/bin/sh\nsleep 60\n")
        cluster.wait(shared, "RUNNING", timeout=60)
        node = cluster.job(shared)["NodeList"]
        url = urls[("agent", node)]

        def gpu_of_shared_job():
            agent = scrape(url)
            per_gpu = {}
            for family in ("gpupack_gpu_shares_in_use", "gpupack_gpu_mig_slices_in_use", "gpupack_gpu_jobs"):
                for s in agent[family].samples:
                    per_gpu.setdefault(s.labels["gpu"], {})[family] = s.value
            return [g for g in per_gpu.values() if g == {"gpupack_gpu_shares_in_use": 2,
                                                         "gpupack_gpu_mig_slices_in_use": 2, "gpupack_gpu_jobs": 1}]

        deadline = time.time() + 20
        while not gpu_of_shared_job() and time.time() < deadline:
            time.sleep(0.5)
        assert gpu_of_shared_job(), f"no GPU of {node} shows the shard:2 job in a 2-slice MIG instance"
        assert sample(scrape(url), "gpupack_node_jobs", node=node, isolation="mig") == 1
    finally:
        cluster.cancel_all()
