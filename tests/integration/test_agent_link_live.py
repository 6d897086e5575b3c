"""The helper <-> agent link on the live cluster: samples over MUNGE-authenticated HTTP; an
agent that stops makes its node stale (nothing packed there) until it is back."""
from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.error
import urllib.request

import pytest

from e2e_support import simgpu_script, wait_for
from test_submit_shim import record_of, script, seed_history

pytestmark = pytest.mark.integration


def agent_pid(cluster, node: str) -> int:
    procs = json.loads((cluster.state_dir / "run" / "processes.json").read_text())
    return next(p["pid"] for p in procs if p["role"] == "agent" and p["name"] == node)


def stop_agent(cluster, node: str) -> None:
    """SIGTERM to ``node``'s agent, and its end waited for: `DevCluster.up()` starts again only
    the daemons that no longer run, and an agent still closing its servers counts as running
    (seen in CI: up() then waited 60 s for an agent that had ended meanwhile)."""
    from slurm_plugin.devcluster.processes import alive_with

    pid = agent_pid(cluster, node)
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not alive_with(pid, str(cluster.state_dir)), 30, f"{node}'s agent ended")


def stale_in_view(cluster, node: str) -> bool:
    from slurm_plugin.helper.cluster_view import STALE
    from slurm_plugin.helper.view_file import snapshot_from_doc, view_path

    doc = json.loads(view_path(cluster.spec.helper_socket).read_text())
    return any(n.name == node and STALE in n.states for n in snapshot_from_doc(doc).nodes)


def test_samples_reach_the_helper_over_http_and_no_credential_gets_401(cluster):
    from slurm_plugin.agent.client import samples

    link = cluster.link
    try:
        job = cluster.submit(["-J", "link-samples", "-w", "node1", "--gres=shard:2"],
                             simgpu_script("--workload ResNet18 --mem-start 1GiB --iters 600 --iter-ms 50"))
        cluster.wait(job, "RUNNING", 30)
        (sample,) = wait_for(lambda: samples(link, "node1", job, latest=True), 20, "a sample over the link")
        assert sample.job_id == job and sample.node == "node1"
        address = link.directory("node1")
        request = urllib.request.Request(f"http://{address}/v1/samples", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 401
    finally:
        cluster.cancel_all()


def test_a_killed_agent_makes_its_node_stale_nothing_is_packed_there_and_it_recovers(cluster):
    cluster.set_option("pack_only_when_no_idle_gpu", "false")
    body = script("link-stale")
    seed_history(cluster, "link-stale", body)
    try:
        wait_for(lambda: not stale_in_view(cluster, "node2"), 30, "node2 fresh at the start")
        stop_agent(cluster, "node2")
        wait_for(lambda: stale_in_view(cluster, "node2"), 30, "node2 stale in the published cluster view")
        job = cluster.submit(["-J", "link-stale", "--hold", "--gres=gpu:1"], body)
        record = record_of(cluster, job)
        assert record.verdict == "packed", cluster.job(job)["AdminComment"]
        assert "node2" in cluster.job(job)["ExcNodeList"]  # kept off the node nobody can watch
        cluster.dev.up()  # the agent of node2 again
        cluster.set_option("pack_only_when_no_idle_gpu", "false")  # up() wrote the settings afresh
        wait_for(lambda: not stale_in_view(cluster, "node2"), 40, "node2 fresh again once its agent answers")
        again = cluster.submit(["-J", "link-stale", "--hold", "--gres=gpu:1"], body)
        assert record_of(cluster, again).verdict == "packed", cluster.job(again)["AdminComment"]
        assert "node2" not in (cluster.job(again).get("ExcNodeList") or "")
    finally:
        cluster.cancel_all()
        cluster.reset_options()
        time.sleep(0.1)


def test_each_run_of_a_requeued_job_is_collected_over_the_link_and_acknowledged(cluster):
    """Each run of a requeued job leaves its own final summary on the node; the helper collects
    both over the link, records them (the requeued run as a lower bound) and acknowledges them,
    after which the agent keeps none."""
    from store.db import Store
    from slurm_plugin.agent.client import collect_finals

    link = cluster.link
    try:
        job = cluster.submit(["-J", "link-finals", "-w", "node1", "--gres=shard:1", "--requeue"],
                             simgpu_script("--workload ResNet18 --mem-start 1GiB --iters 120 --iter-ms 50"))
        cluster.wait(job, "RUNNING", 30)
        time.sleep(3)  # its batch step is isolated and sampled on node1
        cluster.run("scontrol", "requeue", str(job))
        assert cluster.wait(job, {"COMPLETED", "FAILED"}, 120) == "COMPLETED"
        store = Store(cluster.spec.database)

        def recorded():
            rows = sorted((r for r in store.runs(limit=500) if r.job_id == job), key=lambda r: r.ended_at)
            return len(rows) == 2 and rows

        first, second = wait_for(recorded, 60, "both runs recorded from the finals the helper collected")
        assert first.lower_bound and not second.lower_bound, (first, second)
        wait_for(lambda: not [f for f in collect_finals(link, "node1") if f["job_id"] == job], 60,
                 "the agent keeps no summary of the job once the helper acknowledged it")
    finally:
        cluster.cancel_all()


def test_a_node_whose_gres_conf_disagrees_is_not_packed_onto_and_recovers_when_fixed(cluster):
    """node2's gres.conf gives one shard per GPU fewer than gpupack.toml: the helper refuses to
    pack onto node2, says why (event, metric, cluster view), and packs there again once fixed."""
    from store.db import Store

    gres = cluster.spec.etc / "gres.conf"  # the site's shared configuration (read-only on the nodes)
    original = cluster.node_path("node2", gres).read_text()
    (count,) = {int(c) for c in re.findall(r"^NodeName=node2 .*Name=shard.* Count=(\d+)", original, flags=re.M)}
    other = count - 1  # what node2's gres.conf will say instead of gpupack.toml's shares_per_gpu
    cluster.set_option("pack_only_when_no_idle_gpu", "false")
    body = script("link-agree")
    seed_history(cluster, "link-agree", body)
    store = Store(cluster.spec.database)
    metrics = cluster.spec.database.with_name("metrics.prom")

    began = time.time()

    def events(kind: str) -> list:  # this test's, of node2
        return [e for e in store.events(limit=500) if e.kind == kind and "node2" in e.detail and e.at >= began]

    try:
        wait_for(lambda: not stale_in_view(cluster, "node2"), 30, "node2 fresh at the start")
        gres.write_text("\n".join(line.replace(f"Count={count}", f"Count={other}") if line.startswith("NodeName=node2 ")
                                  else line for line in original.splitlines()) + "\n")
        wait_for(lambda: stale_in_view(cluster, "node2"), 30, "node2 refused in the published cluster view")
        (event,) = wait_for(lambda: events("node-disagrees"), 30, "a node-disagrees event")
        assert f"{other} shards per GPU in its gres.conf" in event.detail, event.detail
        assert f"shares_per_gpu = {count}" in event.detail, event.detail
        wait_for(lambda: 'gpupack_node_disagrees{node="node2"' in metrics.read_text(), 30, "the metric")
        assert not stale_in_view(cluster, "node1")  # the others agree
        job = cluster.submit(["-J", "link-agree", "--hold", "--gres=gpu:1"], body)
        assert record_of(cluster, job).verdict == "packed", cluster.job(job)["AdminComment"]
        assert "node2" in cluster.job(job)["ExcNodeList"]  # kept off the node that disagrees
    finally:
        gres.write_text(original)
    wait_for(lambda: not stale_in_view(cluster, "node2"), 30, "node2 agrees again once gres.conf is fixed")
    try:
        wait_for(lambda: events("node-agrees"), 30, "a node-agrees event")
        # the metrics file is written once a round: it may show the round before the event's
        wait_for(lambda: 'gpupack_node_disagrees{node="node2"' not in metrics.read_text(), 30, "the metric cleared")
        again = cluster.submit(["-J", "link-agree", "--hold", "--gres=gpu:1"], body)
        assert record_of(cluster, again).verdict == "packed", cluster.job(again)["AdminComment"]
        wait_for(lambda: "node2" not in (cluster.job(again).get("ExcNodeList") or ""), 30,
                 "the pending job no longer kept off node2")
    finally:
        cluster.cancel_all()
        cluster.reset_options()
        store.close()


def test_a_restarted_agent_refuses_a_job_list_older_than_it_took_before(cluster):
    """Generations survive an agent restart: a replayed old job list is refused afterwards."""
    from slurm_plugin.agent.client import AgentRefused, AgentUnavailable, push_jobs
    from slurm_plugin.agent.paths import AgentPaths

    kept = cluster.node_path("node3", AgentPaths(cluster.state_dir, "node3").generations)
    before = wait_for(lambda: kept.exists() and json.loads(kept.read_text()).get("jobs"), 30,
                      "the helper's job lists taken by node3's agent")
    stop_agent(cluster, "node3")
    wait_for(lambda: stale_in_view(cluster, "node3"), 30, "node3 stale while its agent is down")
    cluster.dev.up()  # the agent of node3 again
    cluster.reset_options()  # up() wrote the settings afresh
    link = cluster.link

    def replay_old_list() -> str | None:
        try:
            push_jobs(link, "node3", [], before - 1)
            return "taken"
        except AgentRefused as exc:
            return f"refused: {exc}"
        except AgentUnavailable:
            return None  # not up yet

    outcome = wait_for(replay_old_list, 30, "node3's agent answering")
    assert outcome.startswith("refused") and "older" in outcome, outcome
    assert json.loads(kept.read_text())["jobs"] >= before
    wait_for(lambda: not stale_in_view(cluster, "node3"), 40, "node3 fresh again")


def test_an_agent_that_lost_its_state_and_journal_gets_its_slice_back_from_the_controllers_copy(cluster):
    """The controller mirrors node1's slice journal; node1's agent restarts without state.json
    and without its journal: the running job's slice is left alone, then given back from the
    controller's copy once NVML and the job list confirm it."""
    from store.slices import SliceMirror
    from store.db import Store
    from slurm_plugin.agent.client import status
    from slurm_plugin.agent.paths import AgentPaths

    link = cluster.link
    store = Store(cluster.spec.database)
    home = cluster.node_path("node1", AgentPaths(cluster.state_dir, "node1").home)
    try:
        job = cluster.submit(["-J", "journal-copy", "-w", "node1", "--gres=shard:2"],
                             simgpu_script("--workload ResNet18 --mem-start 1GiB --iters 4000 --iter-ms 50"))
        cluster.wait(job, "RUNNING", 30)
        held = wait_for(lambda: status(link, "node1")["jobs"].get(str(job), {}).get("device"), 30,
                        "the job's slice on node1")
        assert held.startswith("MIG-")
        wait_for(lambda: [h for h in SliceMirror(store).held("node1") if h.job_id == job and h.uuid == held],
                 90, "the controller's copy of node1's journal holding the job's slice")
        stop_agent(cluster, "node1")
        wait_for(lambda: stale_in_view(cluster, "node1"), 30, "node1's agent down")
        (home / "state.json").unlink()
        (home / "slices.jsonl").unlink()
        cluster.dev.up()  # node1's agent again, knowing nothing of its slices
        cluster.reset_options()
        restored = wait_for(lambda: [e for e in store.events(limit=500)
                                     if e.kind == "slice-restored" and f"job {job}'s" in e.detail], 90,
                            "the slice given back from the controller's copy")
        assert held in restored[0].detail
        now = status(link, "node1")
        assert now["jobs"][str(job)]["device"] == held and held not in now["unsure_slices"]
        assert cluster.job(job)["JobState"] == "RUNNING"
    finally:
        cluster.cancel_all()
        store.close()
