"""A login is not adopted into a packed job (pam_slurm_adopt runs no task hook: the adopted
processes would run outside the job's isolation); `gpupack agent adopt-check` is the pam_exec side."""
from __future__ import annotations

import pwd
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent.adoption import adoption_refusal
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.ops import dispatch
from slurm_plugin.agent.paths import socket_path
from slurm_plugin.agent.server import AgentServer
from slurm_plugin.agent.state import BATCH_STEP, Assignment
from slurm_plugin.agent.trust import Peer, may_call
from slurm_plugin.cli.agent_cmd import agent as agent_cli

NOBODY = pwd.getpwnam("nobody").pw_uid
ROOT = Peer(1, 0, 0)


def held(job_id: int, uid: int | None, shards: int) -> Assignment:
    kind = "mig" if shards else "whole"
    return Assignment(job_id, "node1", 0, kind, "mig:1g.10gb@0" if shards else "whole", shards=shards, uid=uid)


def test_a_user_holding_a_packed_job_here_is_refused_others_not():
    jobs = [held(7, 1000, 1), held(8, 1001, 0)]
    assert "packed job(s) 7" in adoption_refusal(jobs, 1000)
    assert adoption_refusal(jobs, 1001) is None  # a whole GPU: adopted as Slurm does it
    assert adoption_refusal(jobs, 1002) is None  # no job here: pam_slurm_adopt decides
    assert "no known user" in adoption_refusal([*jobs, held(9, None, 2)], 1001)  # could be theirs


@pytest.fixture
def node(tmp_path):
    state = Path(tempfile.mkdtemp(prefix="gp-adopt-"))  # a short path for the socket
    agent = NodeAgent("node1", state, SimGpuBackend(None, "node1", gpus=["H100-80GB"]))
    server = AgentServer(socket_path(state, "node1"), agent, {0})
    server.serve_in_thread()
    yield state, agent
    server.shutdown()
    server.server_close()
    shutil.rmtree(state)


def test_the_agent_answers_root_only_from_what_it_isolated(node):
    _, agent = node
    assert not may_call("adoption", Peer(2, NOBODY, NOBODY), {0}) and may_call("adoption", ROOT, {0})
    assert dispatch(agent, "adoption", {"uid": NOBODY}, ROOT)["refuse"] is None
    agent.isolate(7, BATCH_STEP, NOBODY, {"SLURM_JOB_GPUS": "0", "SLURM_SHARDS_ON_NODE": "1"})
    assert "packed job(s) 7" in dispatch(agent, "adoption", {"uid": NOBODY}, ROOT)["refuse"]
    with pytest.raises(ValueError):
        dispatch(agent, "adoption", {"uid": "nobody"}, ROOT)  # a uid, never a name the caller chose


def adopt_check(state: Path, user: str) -> tuple[int, str]:
    got = CliRunner().invoke(agent_cli, ["--node", "node1", "--state-dir", str(state), "adopt-check"],
                             env={"PAM_USER": user})
    return got.exit_code, got.output


def test_adopt_check_refuses_a_packed_jobs_user_and_fails_closed(node):
    state, agent = node
    assert adopt_check(state, "nobody") == (0, "")
    agent.isolate(7, BATCH_STEP, NOBODY, {"SLURM_JOB_GPUS": "0", "SLURM_SHARDS_ON_NODE": "1"})
    code, said = adopt_check(state, "nobody")
    assert code == 1 and "no login on node1" in said and "packed job(s) 7" in said
    assert adopt_check(state, "root") == (0, "")  # the admin
    assert adopt_check(state, "no-such-user-here")[0] == 1
    socket_path(state, "node1").unlink()  # the agent cannot be asked
    code, said = adopt_check(state, "nobody")
    assert code == 1 and "does not answer" in said
