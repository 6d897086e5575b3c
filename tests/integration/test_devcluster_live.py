"""The dev cluster as an admin sees it: `gpupack devcluster status --json` and `env`."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

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
    assert roles == Counter({"munged": 1, "slurmctld": 1, "slurmd": 3, "helper": 1, "watcher": 1, "agent": 3})
    bad = [r for r in rows if not (r["alive"] and r["healthy"])]
    assert not bad, bad
    watcher = next(r for r in rows if r["role"] == "watcher")
    assert watcher["pid"] > 0 and "cluster view" in watcher["detail"]


def test_env_points_plain_slurm_commands_at_the_cluster(cluster):
    text = gpupack(cluster, "env").stdout
    assert f"export SLURM_CONF={cluster.spec.slurm_conf}" in text
    out = subprocess.run(["bash", "-c", text + "\nscontrol show config | grep -i '^ClusterName\\|^SlurmctldPort'"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    assert str(cluster.spec.port) in out
