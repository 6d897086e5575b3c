"""MIG layouts that follow the queue: the pure step, and the agent applying it on the simulated GPU."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from mig.catalog import load_catalog
from mig.fsm import PartitionState, Placement, get_space
from mig.node_layout import layout_step
from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.state import BATCH_STEP

SPACE = get_space(load_catalog("H100-80GB"))


def shard_env(gpu: int, shards: int) -> dict[str, str]:
    return {"SLURM_JOB_GPUS": str(gpu), "CUDA_VISIBLE_DEVICES": str(gpu), "SLURM_SHARDS_ON_NODE": str(shards)}


def apply(state: PartitionState, step) -> PartitionState:
    for p in step.destroy:
        state = state.free(p.profile, p.start)
    for p in step.create:
        state = state.alloc(p.profile, p.start)
    return state


def test_by_size_fills_idle_space_with_the_commonest_size_and_keeps_busy_slices():
    state = PartitionState.parse(SPACE, "3g.40gb@4,2g.20gb@0")
    busy = [Placement("3g.40gb", 4)]
    step = layout_step(state, busy, ["1g.10gb"] * 5 + ["2g.20gb"], "by-size")
    assert step.destroy == (Placement("2g.20gb", 0),)
    assert [p.profile for p in step.create] == ["1g.10gb"] * 4
    after = apply(state, step)
    assert Placement("3g.40gb", 4) in after.placements
    # once the slices are there, the same queue asks for nothing more
    assert layout_step(after, busy, ["1g.10gb"] * 4, "by-size").changes == 0


def test_in_order_serves_the_head_first_and_stops_at_a_job_that_must_wait():
    state = PartitionState.parse(SPACE, "4g.40gb@0")
    busy = [Placement("4g.40gb", 0)]
    step = layout_step(state, busy, ["3g.40gb", "7g.80gb", "1g.10gb"], "in-order")
    assert step.create == (Placement("3g.40gb", 4),) and step.destroy == ()  # 7g waits: nobody overtakes it
    assert layout_step(state, busy, ["1g.10gb"], "off").changes == 0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb"]), max_size=6),
    st.lists(st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]), min_size=1, max_size=8),
    st.sampled_from(["in-order", "by-size"]),
    st.randoms(use_true_random=False),
)
def test_a_step_never_touches_a_busy_slice_and_always_applies(existing, pending, policy, rnd):
    state = SPACE.empty()
    for profile in existing:
        starts = [s for s in load_catalog("H100-80GB").profile(profile).placement_starts
                  if _fits(state, profile, s)]
        if starts:
            state = state.alloc(profile, rnd.choice(starts))
    busy = [p for p in state.placements if rnd.random() < 0.5]
    step = layout_step(state, busy, pending, policy)
    assert not set(step.destroy) & set(busy)
    after = apply(state, step)  # raises if the step is not a valid sequence on the hardware
    assert set(busy) <= set(after.placements)


def _fits(state, profile, start):
    try:
        state.alloc(profile, start)
        return True
    except Exception:
        return False


@pytest.fixture
def agent(tmp_path):
    backend = SimGpuBackend(tmp_path / "sim", "node1", gpus=["H100-80GB"])
    return NodeAgent("node1", tmp_path, backend, list_running_jobs=lambda: set(), sim_dir=tmp_path / "sim"), backend


def test_agent_prepares_slices_and_a_job_takes_one_without_reconfiguring(agent):
    agent, backend = agent
    changes = agent.follow_queue("by-size", [1, 1, 1])
    assert [c["op"] for c in changes] == ["create"] * 3
    assert all(i.owner is None for i in backend.list_instances(0))
    before = agent.reconfigurations
    a = agent.isolate(5, BATCH_STEP, 0, shard_env(0, 1))
    assert agent.reconfigurations == before  # the slice was ready
    assert a.isolation.startswith("mig:1g.10gb@") and "took the idle" in a.notes[0]
    held = [i for i in backend.list_instances(0) if i.owner == "5"]
    assert len(held) == 1 and held[0].uuid == a.device_uuid
    # the job ends: with a layout policy its slice stays, idle, for the next job of its size
    agent.finish(5)
    assert len(backend.list_instances(0)) == 3 and all(i.owner is None for i in backend.list_instances(0))


def test_a_pending_job_the_agent_already_runs_gets_no_slice(agent):
    """The helper read the queue while job 5 waited; by the time its layout came, job 5 had
    started here on its own slice: the layout serves the others only (seen live: a 3g.40gb
    slice laid out for a job that held one already, in place of the 1g.10gb the rest of the
    queue needed)."""
    agent, backend = agent
    agent.isolate(5, BATCH_STEP, 0, shard_env(0, 4))
    changes = agent.follow_queue("in-order", [4, 1, 1], [5, 6, 7])
    assert [(c["op"], c["profile"]) for c in changes] == [("create", "1g.10gb")] * 2
    # unnamed (an older helper), every entry is pending
    made = agent.follow_queue("in-order", [4])
    assert [c["profile"] for c in made if c["op"] == "create"] == ["3g.40gb"]


def test_a_layout_naming_other_than_one_job_per_entry_is_refused(agent):
    from slurm_plugin.agent.ops import dispatch

    agent, _ = agent
    with pytest.raises(ValueError, match="one each"):
        dispatch(agent, "layout", {"policy": "in-order", "pending_shards": [1, 1], "pending_jobs": [6]}, None)


def test_layout_never_destroys_a_slice_a_job_holds(agent):
    agent, backend = agent
    a = agent.isolate(6, BATCH_STEP, 0, shard_env(0, 4))  # 3g.40gb (4 memory slices)
    agent.follow_queue("in-order", [8])  # a whole-GPU-sized packed job cannot fit: nothing destroyed
    assert any(i.owner == "6" for i in backend.list_instances(0))
    agent.follow_queue("by-size", [1] * 8)
    held = [i for i in backend.list_instances(0) if i.owner == "6"]
    assert len(held) == 1 and held[0].uuid == a.device_uuid
    assert sum(1 for i in backend.list_instances(0) if i.profile == "1g.10gb") >= 3


def test_a_job_that_needs_a_bigger_slice_merges_idle_ones(agent):
    agent, backend = agent
    agent.follow_queue("by-size", [1] * 7)
    assert len(backend.list_instances(0)) == 7
    a = agent.isolate(9, BATCH_STEP, 0, shard_env(0, 4))
    assert a.isolation.startswith("mig:3g.40gb@") or a.isolation.startswith("mig:4g.40gb@")
    # only the idle 1g slices in its way were destroyed, the rest stay ready
    assert 1 <= sum(1 for i in backend.list_instances(0) if i.profile == "1g.10gb") <= 4


def test_a_whole_gpu_job_clears_the_idle_slices(agent):
    agent, backend = agent
    agent.follow_queue("by-size", [2, 2])
    a = agent.isolate(11, BATCH_STEP, 0, {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0"})
    assert a.isolation == "whole"
    assert [i.profile for i in backend.list_instances(0)] == ["7g.80gb"]


def test_unknown_policy_is_refused(agent):
    agent, _ = agent
    with pytest.raises(ValueError, match="layout policy"):
        agent.follow_queue("random", [1])


def test_mps_share_follows_the_helpers_measured_plan(tmp_path):
    from slurm_plugin.agent.ops import dispatch
    from slurm_plugin.agent.plans import StalePlan
    from slurm_plugin.agent.trust import Peer

    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB"], mig_enabled=False)
    agent = NodeAgent("node1", tmp_path, backend, isolation_mode="mps")
    root = Peer(0, 0, 0)
    a = agent.isolate(21, BATCH_STEP, 0, shard_env(0, 2))
    assert a.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"  # from its shares (2 of 5), no plan yet
    dispatch(agent, "mps_plan", {"plan": {"0": {"21": 70, "22": 30}}, "generation": 5}, root)
    assert agent.isolate(21, 0, 0, shard_env(0, 2)).env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "70"
    assert agent.isolate(22, BATCH_STEP, 0, shard_env(0, 2)).isolation == "mps:30"
    with pytest.raises(StalePlan, match="older"):  # a delayed older plan does not undo the newer one
        dispatch(agent, "mps_plan", {"plan": {"0": {"23": 10}}, "generation": 4}, root)
    dispatch(agent, "mps_plan", {"plan": {"0": {"23": 400}}, "generation": 6}, root)  # out of range: ignored
    assert agent.isolate(23, BATCH_STEP, 0, shard_env(0, 2)).isolation == "mps:40"


def test_an_mps_share_turns_mig_off_when_no_job_holds_a_slice(tmp_path):
    from slurm_plugin.agent.daemon import AgentError

    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB", "H100-80GB"])  # MIG on
    mig_agent = NodeAgent("node1", tmp_path / "a", backend)
    mig_agent.follow_queue("by-size", [1, 1])  # idle slices on both GPUs
    mig_agent.isolate(30, BATCH_STEP, 0, shard_env(1, 1))  # GPU 1: a job holds a slice
    mps_agent = NodeAgent("node1", tmp_path / "b", backend, isolation_mode="mps")
    assert mps_agent.isolate(31, BATCH_STEP, 0, shard_env(0, 2)).isolation == "mps:40"
    assert not backend.mig_mode(0) and backend.list_instances(0) == []
    with pytest.raises(AgentError, match="MIG mode with instances"):
        mps_agent.isolate(32, BATCH_STEP, 0, shard_env(1, 2))
    assert any(i.owner == "30" for i in backend.list_instances(1))


def test_status_gives_each_gpus_desired_layout_with_its_reason(agent):
    """An admin reads what the agent aims for from `gpupack agent status`, not only from the
    desired-state file `gpupack mig assert` reads."""
    agent, _ = agent
    at_start = agent.status()["desired_layouts"]
    assert at_start["0"]["placements"] == [] and at_start["0"]["reason"] == "the layout found at agent start"
    agent.follow_queue("by-size", [1, 1])
    desired = agent.status()["desired_layouts"]
    assert list(desired) == ["0"]
    assert desired["0"]["mig_enabled"] is True
    assert [p.split("@")[0] for p in desired["0"]["placements"]] == ["1g.10gb", "1g.10gb"]
    assert desired["0"]["reason"] != at_start["0"]["reason"] and desired["0"]["error"] is None
