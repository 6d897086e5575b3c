"""The simulated GPU backend: placement rules, busy instances, memory, persistence."""
from __future__ import annotations

import json
import multiprocessing as mp

import pytest

from mig.apply import apply_layout, plan_apply
from mig.backend import GpuBackend
from mig.catalog import load_catalog
from mig.errors import (
    BackendUnavailableError, GpuOutOfMemoryError, InsufficientResourcesError, InUseError,
    InvalidPlacementError, MigDisabledError, MigEnabledError, NoPermissionError, NotFoundError,
)
from mig.fsm import Placement, get_space
from gpus.sim.backend import MIB, SimGpuBackend

MODELS = ["A100-SXM4-40GB", "A100-80GB", "A30-24GB", "H100-80GB", "H100-NVL-94GB",
          "H200-141GB", "GH200-96GB"]


def test_sim_backend_satisfies_the_interface():
    assert isinstance(SimGpuBackend(), GpuBackend)


@pytest.mark.parametrize("model", MODELS)
def test_every_full_configuration_round_trips(model):
    be = SimGpuBackend(gpus=[model])
    space = get_space(load_catalog(model))
    for cfg in space.full_configurations():
        for p in cfg:
            be.create_instance(0, p.profile, p.start)
        got = tuple(sorted((Placement(i.profile, i.start) for i in be.list_instances(0)),
                           key=lambda p: (p.start, p.profile)))
        assert got == cfg
        assert be.partition_state(0).is_full
        for inst in be.list_instances(0):
            be.destroy_instance(0, inst.gi_id)
        assert be.list_instances(0) == []


def test_refuses_what_hardware_refuses():
    be = SimGpuBackend(gpus=["H100-80GB"])
    inst = be.create_instance(0, "3g.40gb", 4)
    assert inst.uuid.startswith("MIG-") and inst.size == 4 and inst.ci_id == 0
    with pytest.raises(InsufficientResourcesError, match="GPU 0 of node0.*overlaps 3g.40gb@4"):
        be.create_instance(0, "1g.10gb", 6)
    with pytest.raises(InvalidPlacementError, match="valid starts are"):
        be.create_instance(0, "2g.20gb", 1)
    be.set_owner(0, inst.gi_id, "job42")
    with pytest.raises(InUseError, match="job42"):
        be.destroy_instance(0, inst.gi_id)
    with pytest.raises(InUseError, match="destroy them first"):
        be.set_mig_mode(0, False)
    be.set_owner(0, inst.gi_id, None)
    be.destroy_instance(0, inst.gi_id)
    with pytest.raises(NotFoundError):
        be.destroy_instance(0, inst.gi_id)
    be.set_mig_mode(0, False)
    with pytest.raises(MigDisabledError, match="MIG mode is off"):
        be.create_instance(0, "1g.10gb", 0)
    with pytest.raises(NotFoundError, match="no GPU 3"):
        be.mig_mode(3)


def test_memory_accounting_per_owner():
    be = SimGpuBackend(gpus=["H100-80GB"])
    gpu = be.list_gpus()[0]
    inst = be.create_instance(0, "1g.10gb", 0)
    with pytest.raises(MigEnabledError, match="MIG devices"):
        be.alloc_memory(gpu.uuid, "j1", 1)
    cap = inst.memory_mib * MIB
    assert be.alloc_memory(inst.uuid, "j1", cap // 2) == cap // 2
    be.alloc_memory(inst.uuid, "j2", cap // 4)
    with pytest.raises(GpuOutOfMemoryError, match="restart the job on a larger partition"):
        be.alloc_memory(inst.uuid, "j1", cap // 2)
    assert {(m.owner, m.used_bytes) for m in be.process_memory(0, inst.gi_id)} == {
        ("j1", cap // 2), ("j2", cap // 4)}
    assert be.list_instances(0)[0].busy
    with pytest.raises(InUseError):
        be.destroy_instance(0, inst.gi_id)
    be.free_memory(inst.uuid, "j1", cap // 4)
    be.free_memory(inst.uuid, "j1")
    be.free_memory(inst.uuid, "j2")
    assert be.memory_of("j1") == {inst.uuid: {"current": 0, "peak": cap // 2}}
    assert not be.list_instances(0)[0].busy
    be.forget("j1")
    assert be.memory_of("j1") == {}
    assert be.find_device(inst.uuid) == (0, inst.gi_id)
    # whole GPU with MIG off
    be.destroy_instance(0, inst.gi_id)
    be.set_mig_mode(0, False)
    be.alloc_memory(gpu.uuid, "j3", 10 * MIB)
    with pytest.raises(InUseError, match="whole GPU"):
        be.set_mig_mode(0, True)
    assert be.process_memory(0)[0].used_bytes == 10 * MIB


def test_read_only_backend_refuses_changes():
    be = SimGpuBackend(gpus=["A30-24GB"], read_only=True)
    assert be.list_instances(0) == []
    with pytest.raises(NoPermissionError, match="read-only"):
        be.create_instance(0, "4g.24gb", 0)


def test_persistent_state_is_shared_between_backends(tmp_path):
    a = SimGpuBackend(tmp_path, "n1", gpus=["H100-80GB", "A100-80GB"])
    b = SimGpuBackend(tmp_path, "n1")
    inst = a.create_instance(1, "3g.40gb", 0)
    assert b.device_uuids(1) == {inst.gi_id: inst.uuid}
    doc = json.loads((tmp_path / "n1.json").read_text())
    assert doc["gpus"][1]["instances"][0]["profile"] == "3g.40gb"
    with pytest.raises(InsufficientResourcesError):
        b.create_instance(1, "4g.40gb", 0)
    assert len(a.list_instances(1)) == 1  # failed change left no trace
    with pytest.raises(BackendUnavailableError, match="--sim-gpus"):
        SimGpuBackend(tmp_path, "other")
    # an existing node keeps its state when opened with gpus again
    assert len(SimGpuBackend(tmp_path, "n1", gpus=["A30-24GB"]).list_gpus()) == 2


def _worker(args):
    path, owner = args
    be = SimGpuBackend(path, "n1")
    dev = be.device_uuids(0)[1]
    for _ in range(25):
        be.alloc_memory(dev, owner, MIB)
    return owner


def test_concurrent_processes_do_not_lose_updates(tmp_path):
    be = SimGpuBackend(tmp_path, "n1", gpus=["H100-80GB"])
    be.create_instance(0, "7g.80gb", 0)
    with mp.get_context("fork").Pool(4) as pool:
        pool.map(_worker, [(str(tmp_path), f"j{i}") for i in range(4)])
    used = sum(m.used_bytes for m in be.process_memory(0, 1))
    assert used == 4 * 25 * MIB


def test_apply_layout_steps_and_busy_protection():
    be = SimGpuBackend(gpus=["H100-80GB"])
    want = [Placement("3g.40gb", 4), Placement("2g.20gb", 0), Placement("1g.10gb", 2)]
    res = apply_layout(be, 0, want)
    assert res.status == "success" and [s.action for s in res.steps] == ["create"] * 3
    assert apply_layout(be, 0, want).status == "unchanged"
    gi = next(i.gi_id for i in be.list_instances(0) if i.profile == "3g.40gb")
    be.set_owner(0, gi, "job7")
    with pytest.raises(InUseError, match="job7"):
        plan_apply(be, 0, [Placement("7g.80gb", 0)])
    dry = apply_layout(be, 0, [Placement("3g.40gb", 4), Placement("3g.40gb", 0)], dry_run=True)
    assert dry.status == "planned" and [str(s) for s in dry.steps] == [
        "destroy 1g.10gb@2", "destroy 2g.20gb@0", "create 3g.40gb@0"]
    with pytest.raises(InvalidPlacementError):
        plan_apply(be, 0, [Placement("3g.40gb", 4), Placement("1g.10gb", 5)])
