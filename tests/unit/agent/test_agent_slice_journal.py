"""Slices that know their job, on NVML (which keeps no owner on a MIG instance): an agent
restart with state.json lost or corrupt never hands a running job's slice to another job nor
destroys it, even while the job is between two steps (no process on its slice); a slice
nobody accounts for is left alone and said so; a driver reload (every instance gone) is
reconciled."""
from __future__ import annotations

import os

import pytest

from gpus.nvml.backend import NvmlBackend
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.journal import SliceJournal
from slurm_plugin.agent.state import BATCH_STEP
from gpus.sim.nvml import FakeNvml

UID = os.getuid()
SHARD2 = {"SLURM_JOB_GPUS": "0", "SLURM_STEP_GPUS": "0", "SLURM_SHARDS_ON_NODE": "2"}
WHOLE = {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0"}


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture
def node(tmp_path, monkeypatch):
    fake = FakeNvml(["H100-80GB"], mig_enabled=True)
    fake.install(monkeypatch)
    running: set[int] | None = set()
    clock = Clock()
    box = {"running": running}

    def agent() -> NodeAgent:
        a = NodeAgent("n1", tmp_path, NvmlBackend(), list_running_jobs=lambda: box["running"], clock=clock)
        a.reconcile(at_start=True)
        return a

    return fake, agent, box, clock, tmp_path


def _uuids(agent: NodeAgent) -> set[str]:
    return {i.uuid for i in agent.backend.list_instances(0)}


@pytest.mark.parametrize("damage", ["lost", "corrupt"])
def test_a_job_between_steps_keeps_its_slice_when_state_json_is_lost(node, damage):
    fake, agent, box, clock, home = node
    first = agent()
    box["running"] = {7}
    held = first.isolate(7, 0, UID, SHARD2)  # step 0 ran, ended; no process on the slice now
    first.step_end(7, 0)
    state = home / "agent" / "n1" / "state.json"
    assert state.exists()
    if damage == "lost":
        state.unlink()
    else:
        state.write_text('{"version": 1, "jobs": {"7": {"job_id": ')
    clock.t += 60
    box["running"] = {7, 8}
    second = agent()  # restarted
    newcomer = second.isolate(8, BATCH_STEP, UID, SHARD2)
    assert newcomer.device_uuid != held.device_uuid  # not handed to another job
    assert held.device_uuid in _uuids(second)  # nor destroyed
    again = second.isolate(7, 1, UID, SHARD2)  # its next step finds it
    assert again.device_uuid == held.device_uuid and again.token == held.token
    assert not fake.violations and not fake.errors


def test_a_whole_gpu_job_does_not_clear_a_restored_slice(node):
    _fake, agent, box, clock, home = node
    first = agent()
    box["running"] = {7}
    held = first.isolate(7, 0, UID, SHARD2)
    (home / "agent" / "n1" / "state.json").unlink()
    clock.t += 60
    box["running"] = {7, 9}
    second = agent()
    second.isolate(9, BATCH_STEP, UID, WHOLE)  # destroys idle slices to make room
    assert held.device_uuid in _uuids(second)


def test_a_slice_no_journal_accounts_for_is_left_alone_and_said_so(node):
    fake, agent, box, clock, _home = node
    box["running"] = None  # Slurm does not answer
    stray = NvmlBackend().create_instance(0, "1g.10gb", 0)  # made by an agent that died before journaling
    restarted = agent()
    assert restarted.status()["unsure_slices"] == [stray.uuid]
    box["running"] = {5}
    restarted.isolate(5, BATCH_STEP, UID, {"SLURM_JOB_GPUS": "0", "SLURM_SHARDS_ON_NODE": "1"})
    assert restarted.jobs[5].device_uuid != stray.uuid and stray.uuid in _uuids(restarted)
    clock.t += 60
    restarted.reconcile()  # Slurm runs only job 5, which the agent knows: the stray slice is idle
    assert restarted.status()["unsure_slices"] == []


def test_a_driver_reload_is_reconciled(node):
    fake, agent, box, clock, home = node
    first = agent()
    box["running"] = {7}
    held = first.isolate(7, 0, UID, SHARD2)
    (home / "agent" / "n1" / "state.json").unlink()
    for gi in list(fake.gpu(0).gis.values()):  # every MIG instance gone (driver reload)
        for ci in gi.cis.values():
            fake.gpu(0).mig_slots.pop(ci.slot)
        del fake.gpu(0).gis[gi.id]
    clock.t += 60
    second = agent()
    assert 7 not in second.jobs and second.status()["unsure_slices"] == []
    assert SliceJournal(home / "agent" / "n1").replay().held == {}
    box["running"] = {7, 8}
    assert second.isolate(8, BATCH_STEP, UID, SHARD2).device_uuid not in (None, held.device_uuid)


def test_a_torn_last_line_is_skipped(tmp_path):
    j = SliceJournal(tmp_path)
    j.idle("MIG-a")
    with open(j.path, "a") as fh:
        fh.write('{"op": "assign", "job": 3, "ru')
    view = j.replay()
    assert view.idle == {"MIG-a"} and view.skipped == 1 and view.held == {}
