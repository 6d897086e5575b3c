"""The agent's MIG layouts as desired state: each change recorded, reached through mig.apply,
never at a job's cost, and `gpupack mig assert` on what the simulated GPU shows."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gpus.sim.backend import SimGpuBackend
from mig.errors import InUseError
from mig.fsm import Placement
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.mig_desired import read_desired
from slurm_plugin.agent.state import BATCH_STEP
from slurm_plugin.cli.mig_cmd import mig
from tests.unit.mig.racing_gpu import RacingGpu

SHARD = {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0"}


@pytest.fixture
def node(tmp_path):
    backend = SimGpuBackend(tmp_path / "sim", "node1", gpus=["H100-80GB", "H100-80GB"])

    def make():
        return NodeAgent("node1", tmp_path, backend, list_running_jobs=lambda: set(), sim_dir=tmp_path / "sim")

    return make, backend, tmp_path


def assert_cli(tmp_path, *extra, sim=None):
    """`gpupack mig assert` of the agent whose state folder is ``tmp_path`` (GPUs in ``sim``,
    default ``tmp_path/sim``)."""
    res = CliRunner().invoke(mig, ["assert", "--backend", "sim", "--state-dir", str(sim or tmp_path / "sim"), "--node",
                                   "node1", "--node-state-dir", str(tmp_path), *extra], catch_exceptions=False)
    return res.exit_code, res.output


def layout(backend, gpu=0):
    return sorted((i.profile, i.start) for i in backend.list_instances(gpu))


def test_the_queue_layout_and_a_jobs_slice_are_recorded_and_assert_matches(node):
    make, backend, tmp = node
    agent = make()
    agent.follow_queue("by-size", [1, 1, 1])
    desired = read_desired(agent.paths.mig_desired)
    assert [str(p) for p in desired.gpus[0].placements] == [f"{p}@{s}" for p, s in layout(backend)]
    assert desired.gpus[0].reason.startswith("by-size") and desired.gpus[0].error is None
    code, out = assert_cli(tmp, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["match"] and [g["match"] for g in doc["gpus"]] == [True, True]
    assert doc["gpus"][0]["desired"]["placements"] == doc["gpus"][0]["actual"]["placements"]
    # a 4-share job merges idle slices: its slice is in the desired layout, the GPU matches it
    a = agent.isolate(9, BATCH_STEP, 0, {**SHARD, "SLURM_SHARDS_ON_NODE": "4"})
    mine = Placement(a.profile, a.start)
    assert mine in read_desired(agent.paths.mig_desired).gpus[0].placements
    assert assert_cli(tmp)[0] == 0
    agent.follow_queue("off", [])  # no layout policy: an ended job's slice goes
    agent.finish(9)
    assert mine not in read_desired(agent.paths.mig_desired).gpus[0].placements
    assert (a.profile, a.start) not in layout(backend)
    code, out = assert_cli(tmp)
    assert code == 0 and out.splitlines()[0].startswith("GPU 0: matches (1g.10gb@")


def test_a_slice_changed_by_hand_makes_assert_fail_with_each_difference(node):
    make, backend, tmp = node
    agent = make()
    agent.follow_queue("by-size", [2, 2])
    (first, *_) = backend.list_instances(0)
    backend.destroy_instance(0, first.gi_id)
    backend.create_instance(1, "1g.10gb", 6)
    code, out = assert_cli(tmp)
    assert code == 1
    assert f"GPU 0: differs: missing {first.profile}@{first.start}" in out
    assert "GPU 1: differs: extra 1g.10gb@6" in out
    doc = json.loads(assert_cli(tmp, "--json")[1])
    assert doc["verdict"] == "differs" and doc["gpus"][1]["extra"] == ["1g.10gb@6"]


def test_a_create_the_gpu_refuses_leaves_a_clear_error_and_a_non_matching_assert(node):
    make, backend, tmp = node
    agent = make()
    agent.mig.backend = RacingGpu(backend)
    changes = agent.follow_queue("by-size", [4])  # a 3g.40gb wanted on each GPU; GPU 0 refuses it
    assert [c["gpu"] for c in changes] == [1] and layout(backend) == [("1g.10gb", 0)]  # the hand's, not ours
    recorded = read_desired(agent.paths.mig_desired).gpus[0]
    assert recorded.placements == (Placement("3g.40gb", 0),)  # what the agent still wants
    assert recorded.error.startswith("create 3g.40gb@0 refused: ") and "overlaps 1g.10gb@0" in recorded.error
    code, out = assert_cli(tmp)
    assert code == 1
    assert ("GPU 0: differs: missing 3g.40gb@0; extra 1g.10gb@0; last apply failed: create 3g.40gb@0 refused"
            in out)
    assert "GPU 1: matches (3g.40gb@0)" in out


def test_a_layout_that_would_destroy_a_held_slice_is_refused_and_changes_nothing(node):
    make, backend, tmp = node
    agent = make()
    a = agent.isolate(6, BATCH_STEP, 0, {**SHARD, "SLURM_SHARDS_ON_NODE": "4"})
    agent.follow_queue("by-size", [1, 1, 1])
    before, recorded = layout(backend), read_desired(agent.paths.mig_desired)
    with pytest.raises(InUseError, match=f"{a.profile}@{a.start}"):
        agent.mig.reach(0, [], "a layout without the job's slice")
    backend.set_owner(0, a.gi_id, None)  # even where the GPU shows it idle, the assignment holds it
    with pytest.raises(InUseError, match=f"{a.profile}@{a.start}"):
        agent.mig.reach(0, [], "a layout without the job's slice")
    # an idle slice the agent is unsure of (a job it does not know may hold it) is held too
    (idle, *_) = [i for i in backend.list_instances(0) if i.gi_id != a.gi_id]
    agent.mig.unsure.add(idle.uuid)
    keep = [Placement(i.profile, i.start) for i in backend.list_instances(0) if i.gi_id != idle.gi_id]
    with pytest.raises(InUseError, match=f"{idle.profile}@{idle.start}"):
        agent.mig.reach(0, keep, "a layout without the unsure slice")
    assert layout(backend) == before and read_desired(agent.paths.mig_desired) == recorded
    assert assert_cli(tmp)[0] == 0


def test_a_restarted_agent_adopts_the_layout_it_finds_and_drops_an_ended_jobs_slice(node):
    make, backend, tmp = node
    backend.create_instance(0, "3g.40gb", 4)
    backend.create_instance(0, "1g.10gb", 0, owner="12")  # job 12 ended while the agent was down
    agent = make()
    assert read_desired(agent.paths.mig_desired).gpus[0].placements == (Placement("1g.10gb", 0), Placement("3g.40gb", 4))
    assert assert_cli(tmp)[0] == 0
    agent.reconcile(at_start=True)
    assert layout(backend) == [("3g.40gb", 4)]
    assert read_desired(agent.paths.mig_desired).gpus[0].placements == (Placement("3g.40gb", 4),)
    assert assert_cli(tmp)[0] == 0


def test_assert_cannot_tell_without_a_readable_record_or_gpus(node, tmp_path):
    make, backend, tmp = node
    code, out = assert_cli(tmp)  # no agent ran here
    assert code == 2 and "no desired layout at" in out
    assert json.loads(assert_cli(tmp, "--json")[1])["verdict"] == "unknown"
    agent = make()
    agent.paths.mig_desired.write_text('{"version": 1, "node": "node1", "gpus": "all"}')
    code, out = assert_cli(tmp)
    assert code == 2 and "gpus must be a list" in out
    agent.paths.mig_desired.write_text("{half")
    assert assert_cli(tmp)[0] == 2
    make()  # a new agent writes it again
    res = CliRunner().invoke(mig, ["assert", "--backend", "sim", "--state-dir", str(tmp / "elsewhere"), "--node",
                                   "node1", "--node-state-dir", str(tmp)])
    assert res.exit_code == 2 and "cannot read the GPUs" in res.output


def test_an_mps_share_records_mig_off_and_a_mig_job_records_it_on_again(node):
    make, backend, tmp = node
    NodeAgent("node1", tmp / "mps", backend, isolation_mode="mps").isolate(
        31, BATCH_STEP, 0, {**SHARD, "SLURM_SHARDS_ON_NODE": "2"})
    assert not backend.mig_mode(0)
    mps_record = read_desired(tmp / "mps" / "agent" / "node1" / "mig-desired.json").gpus[0]
    assert (mps_record.mig_enabled, mps_record.placements) == (False, ())
    code, out = assert_cli(tmp / "mps", sim=tmp / "sim")
    assert code == 0 and "GPU 0: matches (MIG off)" in out
    backend.set_mig_mode(0, True)  # by hand: the MPS agent wanted it off
    code, out = assert_cli(tmp / "mps", sim=tmp / "sim")
    assert code == 1 and "GPU 0: differs: MIG off wanted, on now" in out


def test_a_whole_gpu_job_takes_the_idle_full_size_instance_already_there(tmp_path):
    """A MIG-mode GPU whose full-size instance an earlier job left idle: the layout is reached
    with nothing to change, and the job gets that instance (seen in CI: a whole-GPU job
    refused "the layout was reached but 7g.80gb@0 was not made")."""
    backend = SimGpuBackend(tmp_path / "sim", "node1", gpus=["H100-80GB", "H100-80GB"], mig_enabled=True)
    left = backend.create_instance(1, "7g.80gb", 0)
    agent = NodeAgent("node1", tmp_path, backend, list_running_jobs=lambda: set(), sim_dir=tmp_path / "sim")
    a = agent.isolate(5, BATCH_STEP, 1, {"SLURM_JOB_GPUS": "1", "CUDA_VISIBLE_DEVICES": "1"})
    assert (a.profile, a.start, a.gi_id, a.device_uuid) == ("7g.80gb", 0, left.gi_id, left.uuid)
    assert layout(backend, 1) == [("7g.80gb", 0)]
