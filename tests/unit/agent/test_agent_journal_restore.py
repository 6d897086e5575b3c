"""An agent that lost both state.json and its slice journal gets its slices back from the
controller's copy, each confirmed with NVML and the job list; when it cannot be sure, it
leaves the slice alone and says so."""
from __future__ import annotations

import os

import pytest

from gpus.nvml.backend import NvmlBackend
from store.slices import HeldSlice, SliceMirror
from store.db import Store
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.ops import dispatch
from slurm_plugin.agent.trust import Peer
from gpus.sim.nvml import FakeNvml

UID = os.getuid()
SHARD2 = {"SLURM_JOB_GPUS": "0", "SLURM_STEP_GPUS": "0", "SLURM_SHARDS_ON_NODE": "2"}
ROOT = Peer(0, 0, 0)


@pytest.fixture
def node(tmp_path, monkeypatch):
    FakeNvml(["H100-80GB"], mig_enabled=True).install(monkeypatch)
    box: dict = {"running": {7}}
    clock = [1000.0]

    def agent() -> NodeAgent:
        a = NodeAgent("n1", tmp_path, NvmlBackend(), list_running_jobs=lambda: box["running"],
                      clock=lambda: clock[0])
        a.reconcile(at_start=True)
        return a

    return agent, box, clock, tmp_path / "agent" / "n1"


def lose_everything(home) -> None:
    (home / "state.json").unlink()
    (home / "slices.jsonl").unlink()


def copy_of(agent: NodeAgent) -> list[dict]:
    """What the helper mirrors: the journal view over the link, kept in the controller's store."""
    store = Store()
    view = dispatch(agent, "journal", {}, ROOT)
    SliceMirror(store).mirror("n1", [HeldSlice.from_dict(h) for h in view["held"]], 1.0)
    return [h.assignment for h in SliceMirror(store).held("n1")]


def test_the_slices_come_back_from_the_controllers_copy_confirmed_by_nvml_and_the_job_list(node):
    agent, box, clock, home = node
    first = agent()
    held = first.isolate(7, 0, UID, SHARD2)
    first.step_end(7, 0)  # between two steps: no process on its slice
    copy = copy_of(first)
    assert [c["device_uuid"] for c in copy] == [held.device_uuid]
    lose_everything(home)
    clock[0] += 60
    second = agent()
    assert dispatch(second, "journal", {}, ROOT)["unsure"] == [held.device_uuid]  # left alone, said so
    answer = dispatch(second, "restore", {"assignments": copy}, ROOT)
    assert len(answer["restored"]) == 1 and answer["left_alone"] == []
    view = dispatch(second, "journal", {}, ROOT)
    assert view["unsure"] == [] and [h["uuid"] for h in view["held"]] == [held.device_uuid]  # journaled again
    again = second.isolate(7, 1, UID, SHARD2)  # its next step finds its own slice and token
    assert again.device_uuid == held.device_uuid and again.token == held.token
    box["running"] = {7, 8}
    assert second.isolate(8, 0, UID, SHARD2).device_uuid != held.device_uuid
    third = agent()  # and the restored slice survives the next restart, from the agent's own journal
    assert third.jobs[7].device_uuid == held.device_uuid


@pytest.mark.parametrize("running,why", [(None, "cannot confirm the job runs here"),
                                         ({9}, "Slurm does not run the job here")])
def test_without_the_job_list_confirming_it_the_slice_is_left_alone_and_said_so(node, running, why):
    agent, box, clock, home = node
    first = agent()
    held = first.isolate(7, 0, UID, SHARD2)
    first.step_end(7, 0)
    copy = copy_of(first)
    lose_everything(home)
    box["running"] = running  # {9}: a job the agent does not know runs here, so the slice stays unsure
    second = agent()
    answer = dispatch(second, "restore", {"assignments": copy}, ROOT)
    assert answer["restored"] == [] and why in answer["left_alone"][0]
    assert 7 not in second.jobs and held.device_uuid in second.mig.unsure  # untouched, still unsure


def test_a_record_of_a_slice_the_agent_accounts_for_or_no_longer_on_the_gpu_is_refused(node):
    agent, box, clock, home = node
    first = agent()
    held = first.isolate(7, 0, UID, SHARD2)
    copy = copy_of(first)
    answer = dispatch(first, "restore", {"assignments": copy}, ROOT)  # nothing lost: nothing to take
    assert answer["restored"] == [] and "accounts for that slice already" in answer["left_alone"][0]
    moved = [{**copy[0], "start": (copy[0]["start"] + 2) % 8}]
    lose_everything(home)
    second = agent()
    answer = dispatch(second, "restore", {"assignments": moved}, ROOT)  # the GPU says otherwise
    assert answer["restored"] == [] and "the GPU has" in answer["left_alone"][0]
    gone = [{**copy[0], "device_uuid": "MIG-not-here"}]
    assert "no such slice" in dispatch(second, "restore", {"assignments": gone}, ROOT)["left_alone"][0]
    with pytest.raises(ValueError):
        dispatch(second, "restore", {"assignments": "all"}, ROOT)
    assert held.device_uuid in second.mig.unsure
