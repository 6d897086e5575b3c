"""The dev cluster as an admin sees it: `gpupack devcluster status --json` and `env`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def gpupack(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurm_plugin", "devcluster", *args,
                           "--state-dir", str(cluster.spec.state_dir)],
                          capture_output=True, text=True, timeout=60, check=True)


def test_status_lists_every_process_healthy_including_the_helpers_watcher(cluster):
    cluster.dev.up()  # an earlier test may have restarted the helper
    rows = json.loads(gpupack(cluster, "status", "--json").stdout)
    roles = Counter(r["role"] for r in rows)
    hosts = 3 if cluster.spec.multi_host else 0  # multi-host: each node's host, and a munged on each
    assert roles == Counter({"munged": 1 + hosts, "slurmctld": 1, "slurmd": 3, "helper": 1, "watcher": 1, "agent": 3,
                            "web": 1, **({"host": hosts} if hosts else {})})
    bad = [r for r in rows if not (r["alive"] and r["healthy"])]
    assert not bad, bad
    watcher = next(r for r in rows if r["role"] == "watcher")
    assert watcher["pid"] > 0 and "cluster view" in watcher["detail"]
    # every agent is the agent of a real node, on NVML (over the simulated GPU's library)
    assert {r["name"]: r["backend"] for r in rows if r["role"] == "agent"} == dict.fromkeys(cluster.spec.node_names, "nvml")


def test_env_points_plain_slurm_commands_at_the_cluster(cluster):
    text = gpupack(cluster, "env").stdout
    assert f"export SLURM_CONF={cluster.spec.slurm_conf}" in text
    out = subprocess.run(["bash", "-c", text + "\nscontrol show config | grep -i '^ClusterName\\|^SlurmctldPort'"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    assert str(cluster.spec.port) in out


def _daemon_pids(marker: str) -> dict[int, str]:
    """Every munged, slurmctld and slurmd of this root whose command line names ``marker``
    (another release's cluster, in its Debian root, can have the same state folder path)."""
    found = {}
    here = os.stat("/proc/self/root")
    ours = (here.st_dev, here.st_ino)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            root = os.stat(entry / "root")
            if (root.st_dev, root.st_ino) != ours:
                continue
        except OSError:
            continue
        name = Path(argv[0].decode(errors="replace")).name
        if name in ("munged", "slurmctld", "slurmd") and marker.encode() in b" ".join(argv):
            found[int(entry.name)] = name
    return found


def test_daemons_are_followed_through_reconfigure_and_down_stops_exactly_them(cluster):
    cluster.dev.up()
    marker = str(cluster.spec.state_dir)
    before = {(r.role, r.name): r.pid for r in cluster.dev.status() if r.role in ("slurmctld", "slurmd")}
    daemons = 5 + (3 if cluster.spec.multi_host else 0)  # multi-host: a munged on each node's host too
    cluster.run("scontrol", "reconfigure")
    deadline = time.time() + 30
    rows = []
    while time.time() < deadline:
        rows = [r for r in cluster.dev.status() if r.role in ("munged", "slurmctld", "slurmd")]
        if len(rows) == daemons and all(r.alive and r.healthy for r in rows) and len(_daemon_pids(marker)) == daemons:
            break
        time.sleep(0.5)
    assert all(r.alive and r.healthy for r in rows), rows
    assert {r.pid for r in rows} == set(_daemon_pids(marker))  # status names exactly what runs
    after = {(r.role, r.name): r.pid for r in rows if r.role in ("slurmctld", "slurmd")}
    if cluster.release[:2] >= (23, 11):  # reconfigure re-executes the daemons: new pids
        assert all(after[k] != before[k] for k in before), (before, after)
    else:  # 22.05 reconfigures in place
        assert after == before
    try:
        stopped = cluster.dev.down()
        assert {"slurmctld:slurmctld", "slurmd:node1", "munged:munged"} <= set(stopped)
        assert _daemon_pids(marker) == {}  # nothing of ours left, re-executed ones included
    finally:
        cluster.dev.up()
