"""The agent's MIG fence answer: the capability nodes of the job's own instance, read from the
driver's files; no answer but a refusal when they cannot be read."""
from __future__ import annotations

import shutil

import pytest

from gpus.nvml.caps import DriverFiles, mig_minor
from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent import isolation as iso
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.fence import Fence
from slurm_plugin.agent.paths import AgentError
from slurm_plugin.agent.state import BATCH_STEP

SHARDS = {"SLURM_STEP_GPUS": "1", "SLURM_SHARDS_ON_NODE": "1"}


def _agent(tmp_path):
    sim = tmp_path / "simgpu"
    return NodeAgent("n1", tmp_path / "agent", SimGpuBackend(sim, "n1", gpus=["H100-80GB"] * 2), sim_dir=sim)


def test_a_mig_job_is_fenced_to_its_own_instance(tmp_path):
    agent = _agent(tmp_path)
    a = agent.isolate(7, BATCH_STEP, 0, SHARDS)
    b = agent.isolate(8, BATCH_STEP, 0, SHARDS)
    fa, fb = agent.fence(a), agent.fence(b)
    caps = str(tmp_path / "simgpu" / "n1.driver" / "dev" / "nvidia-caps")
    assert fa == Fence(caps, (f"nvidia-cap{mig_minor(1, a.gi_id)}", f"nvidia-cap{mig_minor(1, a.gi_id, 0)}"))
    assert not set(fa.allowed) & set(fb.allowed)  # the other job's nodes are not the first's
    text = iso.answer_lines(a.isolation, a.env, fa.to_dict())
    assert text.splitlines()[1] == f"FENCE {','.join(fa.allowed)} {caps}"
    whole = agent.isolate(9, BATCH_STEP, 0, {"SLURM_STEP_GPUS": "0"})
    assert whole.gi_id is not None and agent.fence(whole).allowed  # a whole GPU in MIG mode: its full instance


def test_no_fence_no_answer(tmp_path):
    agent = _agent(tmp_path)
    a = agent.isolate(7, BATCH_STEP, 0, SHARDS)
    shutil.rmtree(DriverFiles.for_node(tmp_path / "simgpu", "n1").proc_caps)
    with pytest.raises(AgentError, match=r"cannot fence job 7 to its MIG instance .*gpu1/gi\d+/access"):
        agent.fence(a)


def test_the_fence_line_refuses_what_the_plugin_could_misread():
    for bad in (["a,b"], ["x y"], ["../nvidia-cap1"], []):
        with pytest.raises(ValueError):
            iso.answer_lines("mig:1g.10gb@0", {}, {"directory": "/dev/nvidia-caps", "allowed": bad})
