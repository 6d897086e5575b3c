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


#: the environment a user's job gets on a Debian node without the suite's: Debian's default PATH
#: (/etc/profile, /etc/login.defs), no PYTHONPATH, none of the suite's interpreters
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PLAIN_PYTHON_JOB = b"""#!/bin/sh
echo "python3: $(command -v python3)"
echo "prefix: $(python3 -c 'import sys; print(sys.prefix)' 2>&1)"
echo "predictor: $(python3 -c 'import predictor; print(predictor.__file__)' 2>&1 | tail -n 1)"
echo "slurm_plugin: $(python3 -c 'import importlib.util as u; print(u.find_spec("slurm_plugin"))' 2>&1 | tail -n 1)"
"""


def test_a_jobs_plain_python3_does_not_load_the_suites_modules(cluster):
    """The suite lives in its own interpreter (a venv), not the node's python3: a user's job that
    runs `python3 -c "import predictor"` gets no module of ours (ModuleNotFoundError, or another
    distribution's elsewhere)."""
    checkout = str(Path(__file__).resolve().parents[2])
    out = cluster.workdir / "plain-python3.out"
    job = cluster.submit(["-J", "plain-python3", "-o", str(out), f"--export=PATH={NODE_PATH}"], PLAIN_PYTHON_JOB)
    assert cluster.wait(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}, 60) == "COMPLETED"
    lines = dict(line.split(": ", 1) for line in out.read_text().splitlines() if ": " in line)
    assert set(lines) >= {"python3", "prefix", "predictor", "slurm_plugin"}, out.read_text()
    # another Python installation than the suite's (a venv shares its base's binary: compare prefixes)
    assert lines["python3"] and not lines["python3"].startswith(checkout), lines
    assert lines["prefix"].startswith("/") and lines["prefix"] != sys.prefix, (lines, sys.prefix)
    assert lines["slurm_plugin"] == "None", lines  # no installation of the suite on its path
    found = lines["predictor"]
    assert found == "ModuleNotFoundError: No module named 'predictor'" or not found.startswith(checkout), lines
