"""GPUPACK_DEVCLUSTER_CGROUP=v2: the dev cluster's nodes hide the cgroup v1 devices hierarchy in
their own mount namespaces, so on a hybrid host (v1 controllers and the v2 tree) the SPANK plugin
takes its cgroup v2 path (docs/fence.md), while the host keeps its v1 hierarchy."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_plugin.devcluster import topology as topo
from slurm_plugin.devcluster.errors import DevClusterError
from slurm_plugin.devcluster.hosts import node_plan
from slurm_plugin.devcluster.spec import ClusterSpec

ROOT = Path(__file__).resolve().parents[3]


def _plan() -> dict:
    spec = ClusterSpec(state_dir=Path("/var/tmp/mh"), port=18817, nodes=2, topology=topo.MULTI_HOST)
    return node_plan(spec, "node2", "ctlhost")


def test_gpupack_devcluster_cgroup_v2_asks_the_nodes_to_hide_the_v1_devices_hierarchy(monkeypatch):
    monkeypatch.delenv("GPUPACK_DEVCLUSTER_CGROUP", raising=False)
    assert _plan()["hide_v1_devices"] is False
    monkeypatch.setenv("GPUPACK_DEVCLUSTER_CGROUP", "v2")
    assert _plan()["hide_v1_devices"] is True
    monkeypatch.setenv("GPUPACK_DEVCLUSTER_CGROUP", "v1")
    with pytest.raises(DevClusterError, match="expected 'v2'"):
        _plan()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare")
                    or not Path("/sys/fs/cgroup/devices/devices.deny").exists(),
                    reason="needs root, unshare and the cgroup v1 devices controller")
def test_a_node_holder_hides_the_v1_devices_hierarchy_in_its_own_namespace_only():
    code = ("from slurm_plugin.devcluster.holder import hide_v1_devices, make_private; make_private(); "
            "print(hide_v1_devices()); print(open('/proc/self/mountinfo').read())")
    out = subprocess.run(["unshare", "--mount", "--propagation", "unchanged", sys.executable, "-c", code],
                         capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    gone, _, inside = out.partition("\n")
    assert "/sys/fs/cgroup/devices" in gone and " - cgroup2 " in inside, out
    assert not any(" - cgroup " in line and "devices" in line.rsplit(" ", 1)[1].split(",") for line in inside.splitlines())
    assert Path("/sys/fs/cgroup/devices/devices.deny").exists()  # the host keeps it
