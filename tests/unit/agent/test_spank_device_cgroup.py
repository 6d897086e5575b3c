"""The SPANK plugin's device-cgroup half of the MIG fence (spank/gpupack_spank.c, apply_deny), run
in a real cgroup v1 devices hierarchy through a harness built from the plugin's source: a task
in Slurm's cgroup of its job gets the denies there and stays; a task in a shared cgroup joins a
step cgroup of ours below it; a default-deny cgroup whose wildcard allows the nodes is refused.
Needs root, the v1 devices controller, a C compiler and Slurm's headers (skipped otherwise)."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DEVICES = Path("/sys/fs/cgroup/devices")
MAJOR = 61  # the simulated nvidia-caps major: no driver, so an allowed open fails with ENXIO

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not (DEVICES / "devices.deny").exists() or not shutil.which("cc")
    or not Path("/usr/include/slurm/spank.h").exists(),
    reason="needs root, the cgroup v1 devices controller, cc and Slurm's headers")


@pytest.fixture
def harness(tmp_path):
    exe = tmp_path / "harness"
    subprocess.run(["cc", "-std=gnu99", "-I", str(ROOT / "spank"), "-o", str(exe),
                    str(Path(__file__).parent / "data" / "spank_deny_harness.c")], check=True)
    return exe


@pytest.fixture
def base():
    top = DEVICES / f"gpupack-unit-{os.getpid()}"
    top.mkdir()
    yield top
    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        d.rmdir()
    top.rmdir()


def _nodes(tmp_path, *minors):
    out = []
    for m in minors:
        node = tmp_path / f"nvidia-cap{m}"
        os.mknod(node, 0o444 | stat.S_IFCHR, os.makedev(MAJOR, m))
        out.append(str(node))
    return out


def _run_in(cgroup: Path, harness: Path, job: int, spec: str, nodes: list[str]) -> dict[str, str]:
    text = subprocess.run(["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "sh", str(harness),
                           str(job), spec, *nodes], check=True, capture_output=True, text=True).stdout
    out = {"log": text}
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word.startswith("rc="):
            out["rc"] = line
        elif word == "open":  # "open <node> <errno>"
            node, _, result = rest.rpartition(" ")
            out[node] = result
        elif word == "cgroup":
            out["cgroup"] = rest
    return out


def test_a_task_in_slurms_job_cgroup_gets_the_denies_there_and_stays(tmp_path, harness, base):
    step = base / "slurm" / "uid_0" / "job_77" / "step_0"
    step.mkdir(parents=True)
    denied, own = _nodes(tmp_path, 4, 6)
    out = _run_in(step, harness, 77, f"{MAJOR} 3-5,8-8", [denied, own])
    assert out["rc"].startswith("rc=0"), out
    assert out[denied] == "EPERM" and out[own] == "ENXIO", out  # ENXIO: let through, no driver
    assert out["cgroup"] == f"/{base.name}/slurm/uid_0/job_77/step_0"  # never moved out of Slurm's
    assert not list(step.glob("gpupack"))


def test_a_task_in_a_shared_cgroup_joins_a_step_cgroup_of_ours(tmp_path, harness, base):
    shared = base / "system.slice" / "slurmd.service"
    shared.mkdir(parents=True)
    denied, own = _nodes(tmp_path, 4, 6)
    out = _run_in(shared, harness, 77, f"{MAJOR} 3-5", [denied, own])
    assert out["rc"].startswith("rc=0") and out[denied] == "EPERM" and out[own] == "ENXIO", out
    joined = out["cgroup"]
    assert joined.startswith(f"/{base.name}/system.slice/slurmd.service/gpupack/job77_step0_"), joined
    assert "c 61:4 rwm" not in (shared / "devices.list").read_text()  # the shared cgroup untouched
    probe = subprocess.run(["sh", "-c", f"echo $$ > {shared}/cgroup.procs && exec cat {denied}"],
                           capture_output=True, text=True)
    assert "No such device or address" in probe.stderr, probe.stderr  # others there: not denied


def test_a_default_deny_cgroup_that_allows_every_cap_node_is_refused(tmp_path, harness, base):
    step = base / "slurm" / "uid_0" / "job_78" / "step_0"
    step.mkdir(parents=True)
    (step / "devices.deny").write_text("a")
    (step / "devices.allow").write_text(f"c {MAJOR}:* rwm")
    out = _run_in(step, harness, 78, f"{MAJOR} 3-5", [])
    assert out["rc"].startswith("rc=-1") and f"allows every nvidia-caps node ('c {MAJOR}:* rwm')" in out["rc"], out
