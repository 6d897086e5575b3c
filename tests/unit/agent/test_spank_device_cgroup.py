"""The SPANK plugin's device-cgroup half of the MIG fence (spank/gpupack_spank.c, apply_deny), run
in a real cgroup v1 devices hierarchy through a harness built from the plugin's source: a task
in Slurm's cgroup of its job gets the denies there and stays; a task in a shared cgroup joins a
step cgroup of ours below it; a default-deny cgroup whose wildcard allows the nodes is refused.
The same on cgroup v2 (spank/devcg_v2.h: a BPF device program), on the host's real v2
hierarchy, the v1 one hidden from the harness in a mount namespace of its own so that the
plugin's own choice takes the v2 path. Needs root, a C compiler and Slurm's headers, and the v1
devices controller or a v2 mount where the kernel loads BPF device programs (skipped otherwise)."""
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



def _v2_mount() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        if tail.split()[0] == "cgroup2" and fields.split()[3] == "/":
            return Path(fields.split()[4])
    return None


V2 = _v2_mount()
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("cc") or not Path("/usr/include/slurm/spank.h").exists(),
    reason="needs root, cc and Slurm's headers")
needs_v1 = pytest.mark.skipif(not (DEVICES / "devices.deny").exists(), reason="needs the cgroup v1 devices controller")
needs_v2 = pytest.mark.skipif(V2 is None, reason="needs a cgroup v2 mount (of the whole hierarchy)")


@pytest.fixture
def harness(tmp_path):
    exe = tmp_path / "harness"
    subprocess.run(["cc", "-std=gnu99", "-I", str(ROOT / "spank"), "-o", str(exe),
                    str(Path(__file__).parent / "data" / "spank_deny_harness.c")], check=True)
    return exe


def _cgroup_tree(parent: Path):
    top = parent / f"gpupack-unit-{os.getpid()}"
    top.mkdir()
    yield top
    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        d.rmdir()
    top.rmdir()


@pytest.fixture
def base():
    yield from _cgroup_tree(DEVICES)


@pytest.fixture
def base2():
    yield from _cgroup_tree(V2)


def _nodes(tmp_path, *minors):
    out = []
    for m in minors:
        node = tmp_path / f"nvidia-cap{m}"
        os.mknod(node, 0o444 | stat.S_IFCHR, os.makedev(MAJOR, m))
        out.append(str(node))
    return out


def _run_in(cgroup: Path, harness: Path, job: int, spec: str, nodes: list[str], mode: str = "") -> dict[str, str]:
    env = dict(os.environ, HARNESS_CGROUP=mode) if mode else None
    text = subprocess.run(["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "sh", str(harness),
                           str(job), spec, *nodes], check=True, capture_output=True, text=True, env=env).stdout
    out = {"log": text}
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word.startswith("rc="):
            out["rc"] = line
        elif word == "open":  # "open <node> <errno>"
            node, _, result = rest.rpartition(" ")
            out[node] = result
        elif word in ("cgroup", "removed"):
            out[word] = rest
    return out


@needs_v1
def test_a_task_in_slurms_job_cgroup_gets_the_denies_there_and_stays(tmp_path, harness, base):
    step = base / "slurm" / "uid_0" / "job_77" / "step_0"
    step.mkdir(parents=True)
    denied, own = _nodes(tmp_path, 4, 6)
    out = _run_in(step, harness, 77, f"{MAJOR} 3-5,8-8", [denied, own])
    assert out["rc"].startswith("rc=0"), out
    assert out[denied] == "EPERM" and out[own] == "ENXIO", out  # ENXIO: let through, no driver
    assert out["cgroup"] == f"/{base.name}/slurm/uid_0/job_77/step_0"  # never moved out of Slurm's
    assert not list(step.glob("gpupack"))


@needs_v1
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


@needs_v1
def test_a_default_deny_cgroup_that_allows_every_cap_node_is_refused(tmp_path, harness, base):
    step = base / "slurm" / "uid_0" / "job_78" / "step_0"
    step.mkdir(parents=True)
    (step / "devices.deny").write_text("a")
    (step / "devices.allow").write_text(f"c {MAJOR}:* rwm")
    out = _run_in(step, harness, 78, f"{MAJOR} 3-5", [])
    assert out["rc"].startswith("rc=-1") and f"allows every nvidia-caps node ('c {MAJOR}:* rwm')" in out["rc"], out


def _programs(harness: Path, cgroup: Path) -> str:
    return subprocess.run([str(harness), "query", str(cgroup)], capture_output=True, text=True).stdout.strip()


def _run_v2(cgroup: Path, harness: Path, job: int, spec: str, nodes: list[str]) -> dict[str, str]:
    out = _run_in(cgroup, harness, job, spec, nodes, mode="v2")
    if "loading the BPF device program: Operation not permitted" in out.get("rc", ""):
        pytest.skip(f"the kernel refuses BPF device programs here: {out['rc']}")
    return out


@needs_v2
def test_v2_a_task_in_a_shared_cgroup_joins_a_step_cgroup_with_the_device_program(tmp_path, harness, base2):
    shared = base2 / "system.slice" / "slurmd.service"
    shared.mkdir(parents=True)
    denied, own, above = _nodes(tmp_path, 4, 6, 8)
    out = _run_v2(shared, harness, 77, f"{MAJOR} 3-5,8-8", [denied, own, above])
    assert out["rc"] == "rc=0 why=", out
    assert out[denied] == "EPERM" and out[above] == "EPERM" and out[own] == "ENXIO", out  # ENXIO: let through
    joined = out["cgroup"]  # named by the step daemon's pid: here the harness's, the task's parent
    assert joined.startswith(f"/{base2.name}/system.slice/slurmd.service/gpupack/job77_step0_"), out
    assert _programs(harness, shared) == "progs 0 flags 0"  # the shared cgroup untouched
    probe = subprocess.run(["sh", "-c", f"echo $$ > {shared}/cgroup.procs && exec cat {denied}"],
                           capture_output=True, text=True)
    assert "No such device or address" in probe.stderr, probe.stderr  # others there: not denied
    # the step's end (the harness as slurmstepd) removed our cgroup, and its program with it
    assert "removed" in out and not (V2 / joined.lstrip("/")).exists() and (shared / "gpupack").is_dir()


@needs_v2
def test_v2_the_program_denies_exactly_the_ranges_char_devices_of_the_major(tmp_path, harness, base2):
    minors = (2, 3, 5, 7, 8, 9, 20, 21)
    nodes = dict(zip(minors, _nodes(tmp_path, *minors)))
    other_major = tmp_path / "other-major-4"  # 60: another local/experimental major, no driver either
    os.mknod(other_major, 0o444 | stat.S_IFCHR, os.makedev(MAJOR - 1, 4))
    block = tmp_path / "block-4"
    os.mknod(block, 0o444 | stat.S_IFBLK, os.makedev(MAJOR, 4))
    out = _run_v2(base2, harness, 77, f"{MAJOR} 3-5,8-8,20-20", [*nodes.values(), str(other_major), str(block)])
    assert out["rc"] == "rc=0 why=", out
    got = {m: out[n] for m, n in nodes.items()}
    assert got == {2: "ENXIO", 3: "EPERM", 5: "EPERM", 7: "ENXIO", 8: "EPERM", 9: "ENXIO", 20: "EPERM", 21: "ENXIO"}
    assert out[str(other_major)] == "ENXIO" and out[str(block)] == "ENXIO", out


@needs_v2
def test_v2_more_ranges_than_the_program_holds_fail_the_fence(harness, base2):
    many = ",".join(f"{m}-{m}" for m in range(0, 2 * 129, 2))  # 129 ranges
    out = _run_in(base2, harness, 77, f"{MAJOR} {many}", [], mode="v2")
    assert out["rc"].startswith("rc=-1") and "(or more than 128) from the agent" in out["rc"], out


def _attach(harness: Path, cgroup: Path, flags: int, minor: int) -> None:
    """A stand-in for Slurm's device program (cgroup/v2, ConstrainDevices): denies MAJOR:minor."""
    done = subprocess.run([str(harness), "attach", str(cgroup), str(flags), str(MAJOR), str(minor)],
                          capture_output=True, text=True)
    if "Operation not permitted" in done.stdout:
        pytest.skip(f"the kernel refuses BPF device programs here: {done.stdout}")
    assert done.returncode == 0, done.stdout


def _slurm_step(base2: Path, job: int) -> Path:
    """Slurm's cgroup/v2 step cgroup, with the step daemon's leaf (where a task is forked) and a
    task's (where slurmstepd moves it before it execs)."""
    step = base2 / "system.slice" / "slurmstepd.scope" / f"job_{job}" / "step_0"
    for leaf in ("slurm", "user/task_0"):
        (step / leaf).mkdir(parents=True)
    return step


def _open_in(cgroup: Path, node: str) -> str:
    probe = subprocess.run(["sh", "-c", f"echo $$ > {cgroup}/cgroup.procs && exec cat {node}"],
                           capture_output=True, text=True)
    return "EPERM" if "Operation not permitted" in probe.stderr else \
        "ENXIO" if "No such device or address" in probe.stderr else probe.stderr


@needs_v2
def test_v2_a_task_in_slurms_job_cgroup_fences_the_step_cgroup_that_holds_its_task_cgroup(tmp_path, harness, base2):
    step = _slurm_step(base2, 77)
    denied, own = _nodes(tmp_path, 4, 6)
    out = _run_v2(step / "slurm", harness, 77, f"{MAJOR} 3-5", [denied, own])
    assert out["rc"] == "rc=0 why=" and out[denied] == "EPERM" and out[own] == "ENXIO", out
    assert out["cgroup"] == f"/{base2.name}/system.slice/slurmstepd.scope/job_77/step_0/slurm"  # not moved
    assert _programs(harness, step) == "progs 1 flags 2" and not list(step.rglob("gpupack"))
    again = _run_v2(step / "slurm", harness, 77, f"{MAJOR} 3-5", [denied])  # the step's next task
    assert again["rc"] == "rc=0 why=" and again[denied] == "EPERM", again
    assert _programs(harness, step) == "progs 1 flags 2"  # the same program once, not once a task
    # where slurmstepd then moves the task (on the task's own cgroup it would be left behind)
    assert (_open_in(step / "user" / "task_0", denied), _open_in(step / "user" / "task_0", own)) == ("EPERM", "ENXIO")
    assert _open_in(step.parent, denied) == "ENXIO"  # the job's other steps: untouched


@needs_v2
def test_v2_under_slurms_own_programs_every_rule_of_theirs_and_ours_holds(tmp_path, harness, base2):
    # Slurm's cgroup/v2 with ConstrainDevices (src/plugins/cgroup/v2): the job's program on job_J
    # and the step's on step_S/user, both BPF_F_ALLOW_OVERRIDE; a task's own (GPUs bound per
    # task) on task_T with no flag, attached while the task is being started, after the fence
    step = _slurm_step(base2, 80)
    (step / "user" / "task_1").mkdir()
    _attach(harness, step.parent, 1, 8)
    _attach(harness, step / "user", 1, 9)
    denied, own, jobs, steps, tasks = _nodes(tmp_path, 4, 6, 8, 9, 10)
    out = _run_v2(step / "slurm", harness, 80, f"{MAJOR} 3-5", [denied, own, jobs])
    assert out["rc"] == "rc=0 why=" and (out[denied], out[own], out[jobs]) == ("EPERM", "ENXIO", "EPERM"), out
    assert _programs(harness, step) == "progs 1 flags 2" and "is taken into ours" in out["log"]  # the job's
    for _ in range(2):  # the step's next tasks: ours beside the first (carrying the job's), once
        assert _run_v2(step / "slurm", harness, 80, f"{MAJOR} 3-5", [jobs])[jobs] == "EPERM"
    assert _programs(harness, step) == "progs 2 flags 2"
    _attach(harness, step / "user" / "task_0", 0, 10)
    task0, task1 = step / "user" / "task_0", step / "user" / "task_1"
    assert [_open_in(task0, n) for n in (denied, jobs, tasks, own)] == ["EPERM", "EPERM", "EPERM", "ENXIO"]
    assert [_open_in(task1, n) for n in (denied, jobs, steps, own)] == ["EPERM", "EPERM", "EPERM", "ENXIO"]


@needs_v2
def test_v2_slurms_step_program_that_ours_would_override_is_taken_into_ours(tmp_path, harness, base2):
    step = _slurm_step(base2, 77)
    _attach(harness, step.parent, 1, 8)  # Slurm's job program: BPF_F_ALLOW_OVERRIDE
    _attach(harness, step, 1, 9)  # Slurm's step program: the same
    denied, own, slurms = _nodes(tmp_path, 4, 6, 9)
    out = _run_v2(step / "slurm", harness, 77, f"{MAJOR} 3-5", [denied, own, slurms])
    assert out["rc"] == "rc=0 why=", out
    assert (out[denied], out[own], out[slurms]) == ("EPERM", "ENXIO", "EPERM"), out  # Slurm's rule still holds
    assert _programs(harness, step) == "progs 1 flags 1" and "is taken into ours" in out["log"]  # replaced
    task = step / "user" / "task_0"
    assert (_open_in(task, denied), _open_in(task, slurms), _open_in(task, own)) == ("EPERM", "EPERM", "ENXIO")


@needs_v2
def test_v2_slurms_job_program_above_a_bare_step_cgroup_is_kept_below_ours(tmp_path, harness, base2):
    step = _slurm_step(base2, 78)
    _attach(harness, step.parent, 1, 9)  # only the job's (OVERRIDE): ours below would override it
    denied, own, slurms = _nodes(tmp_path, 4, 6, 9)
    out = _run_v2(step / "slurm", harness, 78, f"{MAJOR} 3-5", [denied, own, slurms])
    assert out["rc"] == "rc=0 why=", out
    assert (out[denied], out[own], out[slurms]) == ("EPERM", "ENXIO", "EPERM"), out  # without the takeover: ENXIO
    assert _programs(harness, step) == "progs 1 flags 2" and _programs(harness, step.parent) == "progs 1 flags 1"


@needs_v2
def test_v2_a_no_flag_program_on_the_step_cgroup_is_replaced_by_ours_with_its_rules(tmp_path, harness, base2):
    step = _slurm_step(base2, 79)
    _attach(harness, step, 0, 9)  # no flag: only a program with the same flags may replace it
    denied, own, slurms = _nodes(tmp_path, 4, 6, 9)
    out = _run_v2(step / "slurm", harness, 79, f"{MAJOR} 3-5", [denied, own, slurms])
    assert out["rc"] == "rc=0 why=", out
    assert (out[denied], out[own], out[slurms]) == ("EPERM", "ENXIO", "EPERM"), out
    assert _programs(harness, step) == "progs 1 flags 0"


@needs_v2
def test_v2_a_program_above_that_allows_none_below_fails_the_fence(tmp_path, harness, base2):
    shared = base2 / "slurmd.service"
    shared.mkdir(parents=True)
    _attach(harness, base2, 0, 9)
    denied, = _nodes(tmp_path, 4)
    out = _run_in(shared, harness, 77, f"{MAJOR} 3-5", [denied], mode="v2")
    assert out["rc"].startswith("rc=-1") and "allows no other below it" in out["rc"], out


@needs_v2
def test_no_cgroup_at_all_leaves_the_namespace_alone_and_says_so(tmp_path, harness, base2):
    denied, = _nodes(tmp_path, 4)
    out = _run_in(base2, harness, 77, f"{MAJOR} 3-5", [denied], mode="none")
    assert out["rc"] == "rc=0 why=" and out[denied] == "ENXIO", out
    assert "no device cgroup on this node" in out["log"] and "only its mount namespace fences" in out["log"]


def _support(harness: Path, mode: str = "", no_bpf: bool = False) -> str:
    env = dict(os.environ)
    if mode:
        env["HARNESS_CGROUP"] = mode
    if no_bpf:
        env["HARNESS_NO_BPF"] = "1"
    return subprocess.run([str(harness), "support", "-"], check=True, capture_output=True, text=True,
                          env=env).stdout


@needs_v1
def test_slurmd_start_names_the_v1_devices_controller(harness):
    out = _support(harness)
    assert out.startswith("info: gpupack: MIG fences on this node deny capability nodes through the cgroup v1"), out


@needs_v2
def test_slurmd_start_on_cgroup_v2_probes_the_bpf_device_program(harness):
    out = _support(harness, mode="v2")
    assert out.startswith("info: gpupack: MIG fences on this node deny capability nodes through a cgroup v2 BPF"), out


@needs_v2
def test_slurmd_start_where_the_kernel_refuses_the_program_is_an_error_naming_the_consequence(harness):
    out = _support(harness, mode="v2", no_bpf=True)
    assert out.startswith("error: gpupack: this node cannot fence in its device cgroup: loading the BPF device "
                          "program: Operation not permitted"), out
    assert "every packed MIG step here will fail its fence and be requeued (exit 117)" in out


@needs_v2
def test_slurmd_start_with_no_device_cgroup_at_all_is_an_error(harness):
    out = _support(harness, mode="none")
    assert out.startswith("error: gpupack: this node has no device cgroup"), out
