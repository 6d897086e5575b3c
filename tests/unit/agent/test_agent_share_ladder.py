"""Shares that always fit, through the node agent's own placement code.

Slurm admits a shard request on a GPU when it fits the GPU's free shard count (gres.conf
Count=, what the dev cluster writes), in any order of arrivals and departures. The packer asks
only share counts on the model's ladder. Here every such sequence is replayed through
`NodeAgent.isolate` / `step_end` on the simulated GPU (the agent's MigManager places each
slice), on every catalogued model: every admitted request gets its MIG slice. Today's scheme
(8 shards per H100, any count) fails on 8 x shard:1 and on 3 + 5. A request the agent still
cannot place (a count off the ladder, asked around the packer) is refused with the reason, and
nothing is handed out (the SPANK plugin then fails the packed step: never run unisolated).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mig.catalog import list_models, load_catalog
from mig.share_ladder import ShareLadder, counterexample, model_ladder
from gpus.sim.backend import SimGpuBackend
from packer.config import GIB, PackerConfig
from packer.decision import max_shards, shards_needed
from slurm_plugin.agent.daemon import AgentError, NodeAgent
from slurm_plugin.agent.state import BATCH_STEP
from slurm_plugin.devcluster.files import _shares_and_memory
from slurm_plugin.devcluster.spec import ClusterSpec

MODELS = list_models()


class OneGpu:
    """Slurm's admission on one GPU (the free shard count) and the node agent behind it."""

    def __init__(self, home: Path, model: str, shares: int, agent_shares: int | None = None):
        self.backend = SimGpuBackend(None, "node1", gpus=[model])
        self.agent = NodeAgent("node1", home, self.backend, shares_per_gpu=agent_shares,
                               list_running_jobs=lambda: set(self.running))
        self.shares = shares
        self.running: dict[int, int] = {}  # job id -> shards
        self.next_id = 1

    def arrive(self, shards: int) -> int | None:
        """Submit a job of `shards`: None when Slurm would not admit it on this GPU now;
        its job id once the agent isolated it (AgentError when the agent refuses)."""
        if sum(self.running.values()) + shards > self.shares:
            return None
        job, self.next_id = self.next_id, self.next_id + 1
        env = {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0", "SLURM_SHARDS_ON_NODE": str(shards)}
        self.agent.isolate(job, BATCH_STEP, 0, env)
        self.running[job] = shards
        return job

    def leave(self, index: int) -> None:
        if self.running:
            job = sorted(self.running)[index % len(self.running)]
            self.agent.step_end(job, BATCH_STEP)
            del self.running[job]


def dev_cluster_shares(model: str) -> int:
    """The shard Count= per GPU the dev cluster writes to gres.conf for `model`."""
    return _shares_and_memory(ClusterSpec(state_dir=Path("/nonexistent"), gpu_model=model))[0]


def packer_for(model: str) -> PackerConfig:
    return PackerConfig(mode="enforce", gpu_model=model, shares_per_gpu=dev_cluster_shares(model),
                        gpu_memory_gib=load_catalog(model).memory_mib / 1024)


def test_h100_8_jobs_of_one_share_and_3_plus_5_are_placed(tmp_path):
    """Today (8 shards per GPU, any count): the 8th 1-share job and 5 beside 3 had no slice."""
    cfg = packer_for("H100-80GB")
    assert cfg.shares_per_gpu == 5 and cfg.rungs == (1, 2, 4, 5)
    gpu = OneGpu(tmp_path, "H100-80GB", cfg.shares_per_gpu)
    ones = [gpu.arrive(1) for _ in range(8)]
    assert all(ones[:5]) and ones[5:] == [None] * 3  # Slurm sends the other three elsewhere
    assert len(gpu.backend.list_instances(0)) == 5
    # the packer's sizes for the peaks that were 3 and 5 shares of 10 GiB: on the ladder
    three, five = shards_needed(int(24 * GIB), cfg), shards_needed(int(40 * GIB), cfg)
    assert (three, five) == (4, 5) and max_shards(cfg) == 4  # 5 shares: the whole GPU, exclusive
    gpu = OneGpu(tmp_path / "b", "H100-80GB", cfg.shares_per_gpu)
    assert gpu.arrive(three) and gpu.arrive(1) and gpu.arrive(2) is None  # 4 + 1: the GPU is full
    assert sorted(i.profile for i in gpu.backend.list_instances(0)) == ["1g.10gb", "3g.40gb"]


def test_todays_8_shares_fail_in_the_agent(tmp_path):
    """The same requests under today's scheme (8 shards, agent one slice per shard): refused."""
    gpu = OneGpu(tmp_path, "H100-80GB", 8, agent_shares=8)
    for _ in range(7):
        gpu.arrive(1)
    with pytest.raises(AgentError, match="no room for 1g.10gb"):
        gpu.arrive(1)
    gpu = OneGpu(tmp_path / "b", "H100-80GB", 8, agent_shares=8)
    gpu.arrive(3)
    with pytest.raises(AgentError, match="no room for 7g.80gb"):
        gpu.arrive(5)


EVENTS = st.lists(st.one_of(st.tuples(st.just("arrive"), st.floats(0.1, 200.0)),
                            st.tuples(st.just("leave"), st.integers(0, 7))), max_size=30)


@pytest.mark.parametrize("model", MODELS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=EVENTS)
def test_every_admitted_packed_request_is_placed_by_the_agent(model, events):
    """Arrivals are the packer's asks for a peak (GiB); Slurm admits by the free shard count;
    the agent places every one, whatever departed before."""
    cfg = packer_for(model)
    with tempfile.TemporaryDirectory() as home:
        gpu = OneGpu(Path(home), model, cfg.shares_per_gpu)
        for kind, value in events:
            if kind == "leave":
                gpu.leave(int(value))
                continue
            k = shards_needed(int(value * GIB), cfg)
            if k > max_shards(cfg):
                continue  # too large to pack: the job keeps a whole GPU
            assert k in cfg.rungs
            gpu.arrive(k)  # AgentError here is the failure this test exists for
        held = sorted(a.profile for a in gpu.agent.jobs.values())
        assert held == sorted(i.profile for i in gpu.backend.list_instances(0))


def test_a_request_off_the_ladder_that_cannot_be_placed_is_refused_and_nothing_is_handed_out(tmp_path):
    """A count asked around the packer (3 shares on an H100: the 4-share rung's 3g.40gb) can
    still meet a GPU with no room for it: the agent says so and creates nothing; the SPANK
    plugin then fails the packed step (it never runs unisolated)."""
    ladder = model_ladder("H100-80GB")
    any_count = ShareLadder(ladder.model, 5, (1, 2, 3, 4, 5), tuple(ladder.profile_for(k) for k in range(1, 6)))
    events = counterexample(load_catalog("H100-80GB"), any_count)
    assert events is not None and events[-1] == ("arrive", 3)
    gpu = OneGpu(tmp_path, "H100-80GB", 5)
    by_slot: dict[str, int] = {}
    for kind, what in events[:-1]:
        if kind == "arrive":
            job = gpu.arrive(int(what))
            a = gpu.agent.jobs[job]
            by_slot[f"{a.profile}@{a.start}"] = job
        else:
            job = by_slot.pop(str(what))
            gpu.agent.step_end(job, BATCH_STEP)
            del gpu.running[job]
    before = gpu.backend.list_instances(0)
    with pytest.raises(AgentError, match="no room for 3g.40gb"):
        gpu.arrive(3)
    assert gpu.backend.list_instances(0) == before and gpu.next_id - 1 not in gpu.agent.jobs
