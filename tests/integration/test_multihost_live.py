"""The multi-host dev cluster on this machine: each node a host of its own (network, hostname,
mount namespaces on the cluster's bridge), the controller's state out of the nodes' sight.

Runs on the session's cluster when it is multi-host (GPUPACK_TEST_TOPOLOGY=multi-host),
else on a small multi-host cluster of its own (2 nodes, the run's port + 250), taken down at the end.
"""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from conftest import TOPOLOGY, Cluster, run_port, run_state_dir, start_cluster
from slurm_plugin.devcluster.ports import SECOND_CLUSTER_OFFSET
from slurm_plugin.devcluster.spec import ClusterSpec
from slurm_plugin.devcluster.topology import MULTI_HOST

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def mh(request, tmp_path_factory) -> Cluster:
    if TOPOLOGY == MULTI_HOST:
        yield request.getfixturevalue("cluster")
        return
    state = run_state_dir()
    spec = ClusterSpec(state_dir=state.with_name(state.name + "-mh"), nodes=2, gpus_per_node=2,
                       port=run_port() + SECOND_CLUSTER_OFFSET, topology=MULTI_HOST)
    c = start_cluster(spec, tmp_path_factory.mktemp("mh-jobs"))
    yield c
    c.dev.down()


def on(c: Cluster, node: str, *argv: str) -> subprocess.CompletedProcess:
    """Run ``argv`` on ``node``'s host (its namespaces and root), as the cluster starts its daemons."""
    return subprocess.run([*c.dev.hosts.enter(node), *argv], capture_output=True, text=True, timeout=30)


def exists_on(c: Cluster, node: str, path: Path) -> bool:
    return on(c, node, "test", "-e", str(path)).returncode == 0


def test_each_node_has_its_own_hostname_address_and_hosts_file(mh):
    s = mh.spec
    for node in s.node_names:
        assert on(mh, node, "hostname").stdout.strip() == node
        addrs = json.loads(on(mh, node, "ip", "-j", "-4", "addr", "show", "dev", "eth0").stdout)
        assert [a["local"] for a in addrs[0]["addr_info"]] == [s.node_address(node)]
        hosts = on(mh, node, "cat", "/etc/hosts").stdout
        assert f"{s.node_address(node)}\t{node}" in hosts and "127.0.1.1" not in hosts
        assert on(mh, node, "cat", "/etc/hostname").stdout.strip() == node
    assert len({s.node_address(n) for n in s.node_names} | {s.controller_address}) == s.nodes + 1
    # the machine itself keeps its own name and files
    assert subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip() not in s.node_names


def test_status_json_names_each_process_host_pid_and_where_it_listens(mh):
    out = subprocess.run([sys.executable, "-m", "slurm_plugin", "devcluster", "status", "--json", "--state-dir",
                          str(mh.spec.state_dir)], capture_output=True, text=True, timeout=60)
    rows = json.loads(out.stdout)
    assert all({"role", "name", "host", "pid", "url", "metrics_url"} <= set(r) for r in rows)
    by = {(r["role"], r["name"]): r for r in rows}
    s = mh.spec
    for node in s.node_names:
        for role in ("host", "munged", "slurmd", "agent"):
            assert by[(role, node)]["host"] == node and by[(role, node)]["alive"], (role, node)
        assert by[("slurmd", node)]["url"] == f"tcp://{s.node_address(node)}:{s.node_port(1)}"
        assert by[("agent", node)]["url"] == f"http://{s.agent_address(node)}/"
        # the agent's metrics answer on the node's own address, from the controller's host
        url = by[("agent", node)]["metrics_url"]
        assert s.node_address(node) in url
        with urllib.request.urlopen(url, timeout=5) as reply:
            assert reply.status == 200
    for role in ("slurmctld", "helper", "web"):
        assert by[(role, role)]["host"] not in s.node_names
    assert by[("slurmctld", "slurmctld")]["url"] == f"tcp://{s.controller_address}:{s.port}"
    assert by[("slurmctld", "slurmctld")]["metrics_url"] is None
    assert sum(1 for r in rows if r["role"] == "munged") == s.nodes + 1  # one per host


def test_the_controllers_state_does_not_exist_inside_a_node(mh):
    s = mh.spec
    assert s.helper_socket.exists() and (s.state_dir / "ctld").is_dir()  # on the controller, they do
    for node in s.node_names:
        for path in (s.database, s.helper_socket, s.state_dir / "ctld", s.run / "processes.json"):
            assert not exists_on(mh, node, path), (node, path)
        assert exists_on(mh, node, s.slurm_conf)  # the shared configuration is there
        assert exists_on(mh, node, s.run / f"slurmd-{node}.pid")  # and the node's own run folder
        # a node's epilog cannot make a store of its own where the controller's would be
        assert on(mh, node, "touch", str(s.database)).returncode != 0


def test_a_nodes_private_folders_are_seen_neither_by_the_controller_nor_by_another_node(mh):
    s = mh.spec
    first, other = s.node_names[0], s.node_names[1]
    for rel in ("run", f"spool/{first}", "simgpu"):
        mark = s.state_dir / rel / f"private-{first}"
        assert on(mh, first, "touch", str(mark)).returncode == 0
        assert exists_on(mh, first, mark)
        assert not mark.exists(), f"{mark} shows on the controller"
        assert not exists_on(mh, other, mark), f"{mark} shows on {other}"
    assert not exists_on(mh, other, s.state_dir / "spool" / first)
    assert not exists_on(mh, other, s.device_dir(first)) and exists_on(mh, other, s.device_dir(other))
    assert not (s.run / f"slurmd-{first}.pid").exists()


def test_a_plain_job_runs_on_every_node_and_nodes_reach_each_other(mh):
    s = mh.spec
    out = mh.run("srun", f"-N{s.nodes}", "hostname", timeout=60).stdout.decode().split()
    assert sorted(out) == s.node_names  # srun on the controller: SrunPortRange reachable from every node
    marks = mh.workdir / "where"
    marks.mkdir(exist_ok=True)
    for node in s.node_names:
        job = mh.submit(["-w", node, "--wrap", f"hostname > {marks}/{node}.txt"])
        mh.wait(job, "COMPLETED", timeout=60)
        assert (marks / f"{node}.txt").read_text().strip() == node  # written on the node, read here
    a, b = s.node_names[0], s.node_names[-1]
    probe = f"exec 3<>/dev/tcp/{s.node_address(b)}/{s.node_port(1)}"  # node to node, across the bridge
    assert on(mh, a, "bash", "-c", probe).returncode == 0


def test_down_leaves_no_namespace_link_or_process_behind(mh):
    from slurm_plugin.devcluster.processes import alive_with

    holders = dict(mh.dev.hosts.holders)
    try:
        stopped = mh.dev.down()
        assert {f"host:{n}" for n in mh.spec.node_names} <= set(stopped)
        assert mh.dev.hosts.leftovers() == []
        assert not any(alive_with(pid, str(mh.spec.state_dir)) for pid in holders.values())
        marker = str(mh.spec.state_dir).encode()
        ours = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, marker)]
        assert ours == []
    finally:
        if TOPOLOGY == MULTI_HOST:  # the session's cluster: bring it back for the tests after
            mh.dev.up()


def _cmdline_has(proc: Path, marker: bytes) -> bool:
    try:
        return marker in (proc / "cmdline").read_bytes()
    except OSError:
        return False
