"""The SPANK plugin's task hooks (spank/gpupack_spank.c) run through a harness built from its source,
against a scripted agent on a Unix socket (issue 33): a packed step that cannot be isolated is
recorded by root in the node's spool (the helper's only evidence for a requeue) and does not start.
Needs a C compiler and Slurm's headers (skipped otherwise)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from slurm_plugin.agent.unisolated import UnisolatedSpool
from tests.unit.agent.scripted_agent import ScriptedAgent

ROOT = Path(__file__).resolve().parents[3]
BATCH = 4294967291

pytestmark = pytest.mark.skipif(
    not shutil.which("cc") or not Path("/usr/include/slurm/spank.h").exists(), reason="needs cc and Slurm's headers")


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    exe = tmp_path_factory.mktemp("harness") / "harness"
    subprocess.run(["cc", "-std=gnu99", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "spank"), "-o", str(exe),
                    str(Path(__file__).parent / "data" / "spank_task_harness.c")], check=True)
    return exe


@pytest.fixture
def node_dir(tmp_path):
    d = tmp_path / "state"
    d.mkdir()
    return d


def run(harness, node_dir, *, shards="1", node="node1", job_env=None, hook="task", extra=(), timeout=30):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "H_JOB": "7", "H_STEP": str(BATCH), "H_UID": "1000"}
    if node is not None:
        env["SLURMD_NODENAME"] = node  # slurmstepd's own environment (from slurmd's conf)
    if shards is not None:
        env["JOB_SLURM_SHARDS_ON_NODE"] = shards
    env.update({f"JOB_{k}": v for k, v in (job_env or {}).items()})
    args = [str(harness), hook, f"socket={node_dir}/agent-%n.sock", "timeout_ms=400",
            f"spool={node_dir}/agent/%n/unisolated", *extra]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)


def records(node_dir, node="node1"):
    return UnisolatedSpool(node_dir / "agent" / node / "unisolated", node, time.time).pending()


# -- attack 2: the requeue rests on root's record, which a job cannot write ------------------------
def test_a_packed_step_whose_agent_is_down_is_recorded_and_does_not_start(harness, node_dir):
    out = run(harness, node_dir)
    assert out.returncode == 117, out.stdout
    assert "rc=" not in out.stdout  # the program never started
    (rec,) = records(node_dir)
    assert (rec["job_id"], rec["step_id"], rec["node"], rec["shards"], rec["uid"]) == (7, BATCH, "node1", 1, 1000)
    assert "cannot connect" in rec["reason"] and abs(rec["at"] - time.time()) < 60
    spool = node_dir / "agent" / "node1" / "unisolated"
    assert (spool.stat().st_mode & 0o777) == 0o700 and spool.stat().st_uid == os.geteuid()
    (f,) = spool.iterdir()
    assert (f.stat().st_mode & 0o777) == 0o600


def test_a_refused_packed_step_is_recorded_too(harness, node_dir):
    agent = ScriptedAgent(node_dir / "agent-node1.sock", b"ERR no room on GPU 0\nEND\n")
    try:
        out = run(harness, node_dir)
    finally:
        agent.close()
    assert out.returncode == 117 and [r["reason"] for r in records(node_dir)] == ["agent refused: ERR no room on GPU 0"]


def test_a_whole_gpu_step_fails_open_and_leaves_no_record(harness, node_dir):
    out = run(harness, node_dir, shards=None)
    assert out.returncode == 0 and "rc=0" in out.stdout and records(node_dir) == []


def test_a_spool_others_may_write_gets_no_record(harness, node_dir):
    spool = node_dir / "agent" / "node1" / "unisolated"
    spool.mkdir(parents=True)
    os.chmod(spool, 0o777)
    out = run(harness, node_dir)
    assert out.returncode == 117 and list(spool.iterdir()) == []
    assert "only it may write" in out.stdout


# -- attack 3: the node's name comes from slurmd, never from the job -------------------------------
def test_the_node_name_is_slurmds_not_the_jobs(harness, node_dir):
    """The submitter exported SLURMD_NODENAME=node9 (or a multi-node srun inherited the batch
    host's): before, the plugin read the job's value first and asked node9's socket (the step
    failed, exit 117, and the old exit-code requeue lifted it). Now the socket and the request name
    slurmd's node."""
    agent = ScriptedAgent(node_dir / "agent-node1.sock", b"OK none\nEND\n")
    evil = ScriptedAgent(node_dir / "agent-node9.sock", b"OK none\nEND\n")
    try:
        out = run(harness, node_dir, shards=None, job_env={"SLURMD_NODENAME": "node9"})
    finally:
        agent.close()
        evil.close()
    assert out.returncode == 0 and "rc=0" in out.stdout, out.stdout
    assert evil.requests == [] and [r["node"] for r in agent.requests] == ["node1"]
    assert "SLURMD_NODENAME" not in agent.requests[0]["env"]


@pytest.mark.parametrize("name", [None, "", "../run/x", "a/b", ".hidden"])
def test_a_packed_step_without_slurmds_node_name_does_not_start(harness, node_dir, name):
    out = run(harness, node_dir, node=name, job_env={"SLURMD_NODENAME": "node1"})
    assert out.returncode == 117 and "no node name" in out.stdout, out.stdout


# -- attack 4: an answer cut short is a refusal --------------------------------------------------
FULL = b"OK mig:1g.10gb@0\nCUDA_VISIBLE_DEVICES=MIG-abc\nGPUPACK_ISOLATION=mig:1g.10gb@0\nEND\n"


@pytest.mark.parametrize("answer", [
    b"OK mig:1g.10gb@0\nCUDA_VISIBLE_DEVICES=MIG-abc\n",  # cut before END (and before a FENCE line)
    b"OK mig:1g.10gb@0\nCUDA_VISIBLE_DEVICES=MIG-abc\nEN",
    b"OK mig:1g.10gb@0\nEND\nCUDA_VISIBLE_DEVICES=0\n",  # something after END
    b"OK mig:1g.10gb@0\x00\nEND\n",
    b"END\n",
    b"",
])
def test_an_unframed_answer_is_a_refusal(harness, node_dir, answer):
    """Before: an "OK ..." cut short (no FENCE line, the agent died mid-answer) was applied and the
    packed step ran; now it does not start (and is recorded for the helper)."""
    agent = ScriptedAgent(node_dir / "agent-node1.sock", answer)
    try:
        out = run(harness, node_dir)
    finally:
        agent.close()
    assert out.returncode == 117 and "setenv" not in out.stdout, out.stdout
    assert len(records(node_dir)) == 1


def test_a_framed_answer_is_applied(harness, node_dir):
    agent = ScriptedAgent(node_dir / "agent-node1.sock", FULL)
    try:
        out = run(harness, node_dir)
    finally:
        agent.close()
    assert out.returncode == 0 and "rc=0" in out.stdout, out.stdout
    assert "setenv CUDA_VISIBLE_DEVICES=MIG-abc" in out.stdout and "setenv END" not in out.stdout
    assert records(node_dir) == []


def test_a_hold_is_taken_only_framed(harness, node_dir):
    """task_exit: "OK hold" without its END line does not hold the step's end."""
    for answer, held in ((b"OK hold\n", 0), (b"OK hold\nEND\n", 1)):
        agent = ScriptedAgent(node_dir / "agent-node1.sock", [answer, b"OK done\nEND\n"])
        try:
            out = run(harness, node_dir, hook="exit")
        finally:
            agent.close()
            (node_dir / "agent-node1.sock").unlink()
        assert f"held={held}" in out.stdout, (answer, out.stdout)


def test_a_step_end_the_agent_is_slow_to_judge_is_still_held(harness, node_dir):
    """task_exit: the first ask (where the agent reads the output and judges the end) gets the plugin's
    whole budget, not a poll's 1 s: an agent busy reshaping a GPU under its lock answers late."""
    agent = ScriptedAgent(node_dir / "agent-node1.sock", [b"OK hold\nEND\n", b"OK done\nEND\n"], first_after_s=1.5)
    try:
        out = run(harness, node_dir, hook="exit", extra=("timeout_ms=3000",))
    finally:
        agent.close()
    assert "held=1" in out.stdout and "did not take its end" not in out.stdout, out.stdout
    assert [r["op"] for r in agent.requests] == ["task_exit", "task_exit"]


def test_a_held_end_whose_poll_the_agent_answers_late_is_still_held(harness, node_dir):
    """task_exit: a poll of a held end that the agent answers past its budget (a loaded node) is
    asked again. Before, the first late poll let the end go on: the out-of-memory end the helper
    was about to requeue became a failure (seen in CI, under the load of three clusters)."""
    answers = [b"OK hold\nEND\n", b"OK hold\nEND\n", b"OK hold\nEND\n", b"OK done\nEND\n"]
    agent = ScriptedAgent(node_dir / "agent-node1.sock", answers, late_s={2: 1.2})
    try:
        out = run(harness, node_dir, hook="exit")  # timeout_ms=400: a poll waits 400 ms
    finally:
        agent.close()
    assert "held=1" in out.stdout and "did not answer a poll of its held end" in out.stdout, out.stdout
    assert "its end goes on" not in out.stdout, out.stdout
    # asked again until the agent said done
    assert len(agent.requests) >= 4 and all(r["op"] == "task_exit" for r in agent.requests), agent.requests


def test_an_agent_that_never_answers_the_end_is_said_in_slurmds_log(harness, node_dir):
    agent = ScriptedAgent(node_dir / "agent-node1.sock", b"OK hold\nEND\n", first_after_s=2.0)
    try:
        out = run(harness, node_dir, hook="exit")  # timeout_ms=400
    finally:
        agent.close()
    assert "held=0" in out.stdout and "the node agent did not take its end (exit 1)" in out.stdout, out.stdout


def test_a_refusal_the_step_itself_caused_leaves_no_record(harness, node_dir):
    """A step whose own variables disagree with Slurm's record (ERR-STEP) fails, but the helper gets
    no record: the job's own doing earns neither a requeue nor a lift above jobs that waited."""
    agent = ScriptedAgent(node_dir / "agent-node1.sock", b"ERR-STEP its step names GPU [1]\nEND\n")
    try:
        out = run(harness, node_dir)
    finally:
        agent.close()
    assert out.returncode == 117 and records(node_dir) == [] and "not recorded" in out.stdout


class StuckAgent:
    """A Unix socket that never accepts, its backlog full: a connect() to it waits until it accepts
    (an agent flooded with connections, or stuck)."""

    def __init__(self, path: Path):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(0)
        self.queued: list[socket.socket] = []
        while True:  # fill the backlog
            c = socket.socket(socket.AF_UNIX)
            c.setblocking(False)
            try:
                c.connect(str(path))
            except BlockingIOError:
                c.close()
                break
            self.queued.append(c)
        assert self.queued, "the backlog took no connection"

    def close(self):
        for c in self.queued:
            c.close()
        self.sock.close()


@pytest.mark.parametrize("hook", ["task", "exit"])
def test_a_connect_to_a_full_backlog_fails_within_the_budget(harness, node_dir, hook):
    """Before: connect() blocked until the agent accepted, outside timeout_ms (400 ms here): a
    flooded agent held slurmstepd's step start (and its end) without bound."""
    agent = StuckAgent(node_dir / "agent-node1.sock")
    try:
        t0 = time.monotonic()
        out = run(harness, node_dir, hook=hook, timeout=10)
        took = time.monotonic() - t0
    finally:
        agent.close()
    assert took < 3.0, took
    if hook == "task":  # a packed step that cannot be isolated: recorded, does not start
        assert out.returncode == 117 and "rc=" not in out.stdout
        (rec,) = records(node_dir)
        assert "backlog is full" in rec["reason"] and "within 400 ms" in rec["reason"]
    else:
        assert "held=0" in out.stdout


# -- the opt-in out-of-memory observer for Python jobs: a folder in front of the job's PYTHONPATH ----
SITE_DIR = "/opt/gpupack/python_site"


@pytest.mark.parametrize("own, expected", [("/home/u/lib:/srv/x", f"{SITE_DIR}:/home/u/lib:/srv/x"),
                                           (None, SITE_DIR), ("", SITE_DIR)])
def test_a_prepend_line_puts_the_folder_in_front_of_the_jobs_own_pythonpath(harness, node_dir, own, expected):
    answer = FULL.replace(b"\nEND\n", f"\nPREPEND PYTHONPATH={SITE_DIR}\nEND\n".encode())
    agent = ScriptedAgent(node_dir / "agent-node1.sock", answer)
    try:
        out = run(harness, node_dir, job_env=None if own is None else {"PYTHONPATH": own})
    finally:
        agent.close()
    assert out.returncode == 0 and "rc=0" in out.stdout, out.stdout
    assert f"setenv PYTHONPATH={expected}\n" in out.stdout and "setenv CUDA_VISIBLE_DEVICES=MIG-abc" in out.stdout
    assert "(3 variables set" in out.stdout, out.stdout


@pytest.mark.parametrize("line", ["PREPEND LD_PRELOAD=/opt/x.so", "PREPEND PYTHONPATH=relative/dir",
                                  "PREPEND PYTHONPATH=/a:/b", "PREPEND PYTHONPATHX=/a", "PREPEND PYTHONPATH"])
def test_any_other_prepend_is_ignored_and_said(harness, node_dir, line):
    answer = FULL.replace(b"\nEND\n", f"\n{line}\nEND\n".encode())
    agent = ScriptedAgent(node_dir / "agent-node1.sock", answer)
    try:
        out = run(harness, node_dir, job_env={"PYTHONPATH": "/home/u/lib"})
    finally:
        agent.close()
    assert out.returncode == 0 and "rc=0" in out.stdout, out.stdout  # the step runs, isolated as answered
    assert "setenv PYTHONPATH" not in out.stdout and "setenv LD_PRELOAD" not in out.stdout
    assert "error: gpupack: job 7 step" in out.stdout and "ignoring 'PREPEND" in out.stdout, out.stdout


def test_a_pythonpath_too_long_to_read_whole_is_left_as_it_is(harness, node_dir):
    answer = FULL.replace(b"\nEND\n", f"\nPREPEND PYTHONPATH={SITE_DIR}\nEND\n".encode())
    agent = ScriptedAgent(node_dir / "agent-node1.sock", answer)
    try:
        out = run(harness, node_dir, job_env={"PYTHONPATH": "/x" * 20000})
    finally:
        agent.close()
    assert out.returncode == 0 and "rc=0" in out.stdout and "setenv PYTHONPATH" not in out.stdout, out.stdout
    assert "cannot be read whole" in out.stdout
