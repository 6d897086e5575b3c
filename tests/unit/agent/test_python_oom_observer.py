"""The opt-in out-of-memory observer for Python jobs (slurm_plugin/python_site), run in real Python
processes with this folder on PYTHONPATH, as the SPANK plugin sets it, against a fake torch that
keeps PyTorch's contract: ``torch._C._cuda_attach_out_of_memory_observer(fn)`` (which initialises
CUDA) and ``torch.cuda._lazy_call(fn)`` (queued until ``torch.cuda._lazy_init``, where a queued call
that raises fails CUDA's start, as torch's DeferredCudaCallError)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent import isolation as iso
from slurm_plugin.agent import ops
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.server import AgentServer
from slurm_plugin.agent.state import BATCH_STEP
from slurm_plugin.agent.trust import Peer
from tests.unit.agent.scripted_agent import ScriptedAgent

SITE = Path(__file__).resolve().parents[3] / "slurm_plugin" / "python_site"
GIB = 1024**3

FAKE_TORCH = {
    "torch/__init__.py": '''
import os, types
from . import cuda
OBSERVERS = []
CUDA_STARTED = []
def _attach(fn):
    if os.environ.get("FAKE_ATTACH_FAILS"):
        raise RuntimeError("CUDA driver initialization failed")
    CUDA_STARTED.append(True)  # as lazyInitDevice(CUDA)
    OBSERVERS.append(fn)
_C = types.SimpleNamespace()
if not os.environ.get("FAKE_CPU_BUILD"):
    _C._cuda_attach_out_of_memory_observer = _attach
def fake_oom(n):
    for fn in OBSERVERS:
        fn(0, n, 80 << 30, 1 << 30)
    return "OutOfMemoryError raised"
''',
    "torch/cuda.py": '''
_queued = []
_initialized = False
def _lazy_call(fn, **kwargs):
    if _initialized:
        fn()
    else:
        _queued.append(fn)
def _lazy_init():
    global _initialized
    for fn in _queued:
        fn()  # torch wraps a failure here in DeferredCudaCallError: CUDA does not start
    _initialized = True
''',
}

JOB = '''
import sys, torch
print("before-init", len(torch.OBSERVERS), len(torch.CUDA_STARTED))
torch.cuda._lazy_init()
print("after-init", len(torch.OBSERVERS))
for size in sys.argv[1:]:
    print(torch.fake_oom(int(size)))
print("job done")
'''


@pytest.fixture
def fake_torch(tmp_path):
    root = tmp_path / "fake"
    for rel, text in FAKE_TORCH.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


OK = b'{"status": "ok"}\n'


def run_job(fake_torch: Path, *sizes: int, env: dict | None = None, pythonpath: list | None = None,
            code: str = JOB) -> subprocess.CompletedProcess:
    paths = pythonpath if pythonpath is not None else [SITE, fake_torch]
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": os.pathsep.join(map(str, paths)),
            **(env or {})}
    return subprocess.run([sys.executable, "-c", code, *map(str, sizes)], capture_output=True, text=True,
                          env=full, timeout=60)


def step_env(sock: str, token: str = "tok", job: str = "7") -> dict:
    return {"GPUPACK_AGENT_SOCKET": sock, "GPUPACK_REPORT_TOKEN": token, "SLURM_JOB_ID": job}


@pytest.fixture
def scripted(tmp_path):
    path = str(tmp_path / "agent.sock")
    agent = ScriptedAgent(path, OK)
    yield path, agent
    agent.close()


def test_a_failed_allocation_is_told_to_the_agent_after_cuda_starts_never_before(fake_torch, scripted):
    path, agent = scripted
    out = run_job(fake_torch, 10 * GIB, env=step_env(path))
    assert out.returncode == 0, out.stderr
    # importing torch starts nothing: the registration waits for CUDA's own start
    assert "before-init 0 0" in out.stdout and "after-init 1" in out.stdout and "job done" in out.stdout
    assert agent.requests == [{"op": "alloc_failed", "job_id": 7, "token": "tok", "asked_bytes": 10 * GIB}]
    assert out.stderr == ""


def test_reports_are_capped_per_process(fake_torch, scripted):
    sys.path.insert(0, str(SITE))
    from gpupack_oom_observer import MAX_REPORTS

    path, agent = scripted
    out = run_job(fake_torch, *([GIB] * (MAX_REPORTS + 5)), env=step_env(path))
    assert out.returncode == 0 and len(agent.requests) == MAX_REPORTS, out.stderr


@pytest.mark.parametrize("case", ["agent-down", "agent-refuses", "attach-fails", "garbage-answer"])
def test_a_failure_in_the_hook_never_breaks_the_job_and_is_said_once(fake_torch, tmp_path, case):
    path = str(tmp_path / "agent.sock")
    env = step_env(path)
    agent = None
    if case == "agent-refuses":
        agent = ScriptedAgent(path, b'{"status": "error", "reason": "wrong report token for job 7"}\n')
    elif case == "garbage-answer":
        agent = ScriptedAgent(path, b'"not json"\n')  # a JSON string: no status
    elif case == "attach-fails":
        env["FAKE_ATTACH_FAILS"] = "1"
    try:
        out = run_job(fake_torch, GIB, 2 * GIB, 3 * GIB, env=env)
    finally:
        if agent is not None:
            agent.close()
    assert out.returncode == 0 and out.stdout.count("OutOfMemoryError raised") == 3, out.stderr
    assert "job done" in out.stdout
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpupack oom observer: ") and "runs on without it" in lines[0], lines


@pytest.mark.parametrize("case", ["no-step", "cpu-build"])
def test_nothing_is_done_outside_a_step_or_without_cudas_hook(fake_torch, scripted, case):
    path, agent = scripted
    env = {} if case == "no-step" else {**step_env(path), "FAKE_CPU_BUILD": "1"}
    code = "import torch\nprint('ok')" if case == "cpu-build" else (
        "import sys\nprint([type(f).__name__ for f in sys.meta_path if 'After' in type(f).__name__])")
    out = run_job(fake_torch, env=env, code=code)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.strip() == ("ok" if case == "cpu-build" else "[]")
    assert agent.requests == []


def test_torchs_own_module_keeps_its_own_loader(fake_torch, scripted):
    path, _ = scripted
    code = ("import torch, importlib.machinery as m\n"
            "print(type(torch.__loader__).__name__, type(torch.__spec__.loader).__name__)\n"
            "import sys; print(any('After' in type(f).__name__ for f in sys.meta_path))")
    out = run_job(fake_torch, env=step_env(path), code=code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["SourceFileLoader", "SourceFileLoader", "False"]  # the finder left


def test_the_jobs_own_sitecustomize_still_runs(fake_torch, scripted, tmp_path):
    path, agent = scripted
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import builtins\nbuiltins.OWN_SITE = 'ran'\n")
    code = "import builtins, sys, torch\ntorch.cuda._lazy_init()\ntorch.fake_oom(5)\nprint(builtins.OWN_SITE)"
    out = run_job(fake_torch, env=step_env(path), pythonpath=[SITE, own, fake_torch], code=code)
    assert out.returncode == 0 and out.stdout.strip() == "ran", out.stderr
    assert [r["asked_bytes"] for r in agent.requests] == [5]


def test_import_errors_of_torch_stay_torchs(fake_torch, scripted):
    path, _ = scripted
    (fake_torch / "torch" / "__init__.py").write_text("raise ImportError('libcudart.so.12: cannot open')\n")
    out = run_job(fake_torch, env=step_env(path), code="import torch")
    assert out.returncode == 1 and "ImportError: libcudart.so.12: cannot open" in out.stderr
    assert "gpupack oom observer:" not in out.stderr  # the same error, no word of ours


def test_the_real_agent_takes_the_observers_report_as_the_jobs_word(fake_torch, tmp_path):
    """End to end on the node: the agent's socket, its token and pid checks (the process's
    SLURM_JOB_ID), then the step's nonzero end held as an out-of-memory end on the job's word."""
    backend = SimGpuBackend(tmp_path / "sim", "node1", gpus=["H100-80GB"])
    agent = NodeAgent("node1", tmp_path, backend, sim_dir=tmp_path / "sim")
    sockdir = tempfile.mkdtemp(prefix="gp-observer-")
    path = os.path.join(sockdir, "agent-node1.sock")
    server = AgentServer(path, agent, {0, os.geteuid()})
    server.serve_in_thread()
    try:
        a = agent.isolate(7, BATCH_STEP, os.geteuid(), {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0",
                                                         "SLURM_SHARDS_ON_NODE": "1"})
        backend.alloc_memory(a.device_uuid, "7", 5 * GIB)
        agent.tick()
        out = run_job(fake_torch, 10 * GIB, env=step_env(path, a.token))
        assert out.returncode == 0 and out.stderr == "", out.stderr
        assert agent.oom.task_exit(7, BATCH_STEP, 1) == "hold"
        (end,) = agent.oom_ends.waiting()
        assert end["seen_in"] == "report" and end["evidence"] == "reported"
        assert end["asked_bytes"] == 10 * GIB and end["held_bytes"] == 5 * GIB  # held: the GPU's figure
    finally:
        server.shutdown()
        server.server_close()
        if os.path.exists(path):
            os.unlink(path)
        os.rmdir(sockdir)


# -- where a site turns it on, the agent answers packed steps with the folder to put in front -------


@pytest.mark.parametrize("shards, prepended", [("1", True), (None, False)])
def test_only_packed_steps_get_the_observer_and_only_where_the_site_turned_it_on(tmp_path, shards, prepended):
    backend = SimGpuBackend(tmp_path / "sim", "node1", gpus=["H100-80GB"])
    env = {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0", **({"SLURM_SHARDS_ON_NODE": shards} if shards else {})}
    for site in (None, SITE):
        agent = NodeAgent("node1", tmp_path / str(bool(site)), backend, sim_dir=tmp_path / "sim", python_site=site)
        answer = ops.dispatch(agent, "isolate", {"job_id": 7 if site else 8, "step_id": BATCH_STEP, "uid": 0,
                                                 "env": env}, Peer(1, 0, 0))
        want = {"PYTHONPATH": str(SITE)} if site and prepended else None
        assert answer.get("prepend") == want, answer
        text = iso.answer_lines(answer["isolation"], answer["env"], answer.get("fence"), answer.get("prepend"))
        assert (f"\nPREPEND PYTHONPATH={SITE}\n" in text) == bool(want), text
        assert "PYTHONPATH=" not in "".join(f"{k}={v}" for k, v in answer["env"].items())  # never a plain set


@pytest.mark.parametrize("name, folder", [("LD_PRELOAD", "/opt/x"), ("PYTHONPATH", "rel"),
                                          ("PYTHONPATH", "/a:/b"), ("PYTHONPATH", "/a\nEND")])
def test_a_prepend_the_plugin_would_refuse_is_never_written(name, folder):
    with pytest.raises(ValueError):
        iso.answer_lines("mig", {}, None, {name: folder})


def test_the_setting_is_off_by_default_and_named_in_the_example():
    from slurm_plugin.agent.directory import AgentSettings
    from slurm_plugin.cli.agent_cmd import PYTHON_SITE

    assert AgentSettings().python_oom_observer is False
    assert PYTHON_SITE == SITE and (SITE / "sitecustomize.py").is_file()
    example = (SITE.parents[1] / "etc" / "gpupack.toml").read_text()
    assert "python_oom_observer = false" in example
