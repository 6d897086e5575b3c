"""The NVML backend end to end through the *real* pynvml, with only libnvidia-ml faked.

Unlike test_mig_nvml_backend.py (pynvml functions replaced by mocks), every call here
runs pynvml's own wrapper, goes through ctypes with the C prototype of nvml.h, and
reaches a model of H100-80GB GPUs in MIG mode (tests/unit/gpus/fake_libnvml.py). Wrong
function names, argument types, struct types or versions, handle kinds and buffer sizes
fail here as they would (or would corrupt memory) on hardware.
"""
from __future__ import annotations

import ctypes
import logging

import pynvml
import pytest

from fake_libnvml import (ERROR_DRIVER_NOT_LOADED, ERROR_INSUFFICIENT_RESOURCES, MIB,
                          MIG_DISABLE, FakeNvml)
from mig.backend import GpuBackend
from mig.catalog import diff_catalogs, load_catalog
from mig.errors import (BackendUnavailableError, InsufficientResourcesError, InUseError,
                        InvalidPlacementError, MigDisabledError, NoPermissionError,
                        NotFoundError, PlacementOccupiedError)
from mig.fsm import Placement, get_space
from gpus.nvml.backend import NvmlBackend

H100 = load_catalog("H100-80GB")


def _check_clean(fake: FakeNvml) -> None:
    assert not fake.errors, "\n".join(fake.errors)
    assert not fake.violations, fake.violations


@pytest.fixture
def fake(monkeypatch):
    f = FakeNvml(["H100-80GB", "H100-80GB"])
    f.install(monkeypatch)
    yield f
    _check_clean(f)


@pytest.fixture
def backend(fake):
    be = NvmlBackend()
    yield be
    be.close()


def _make(monkeypatch, **kw) -> FakeNvml:
    f = FakeNvml(**kw)
    f.install(monkeypatch)
    return f


def _placements(be, gpu=0):
    return tuple(sorted((Placement(i.profile, i.start) for i in be.list_instances(gpu)),
                        key=lambda p: (p.start, p.profile)))


# -- the fake itself catches misuse -------------------------------------------------------
def test_fake_rejects_wrong_handle_kinds_struct_types_and_small_buffers(fake):
    pynvml.nvmlInit()
    try:
        dev = pynvml.nvmlDeviceGetHandleByIndex(0)
        placement = pynvml.c_nvmlGpuInstancePlacement_t(0, 8)
        gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(dev, 0, ctypes.byref(placement))
        with pytest.raises(ctypes.ArgumentError, match="LP_struct_c_nvmlDevice_t"):
            pynvml.nvmlDeviceGetGpuInstances(gi, 0, None, None)  # GI handle as a device
        count = ctypes.c_uint(0)
        with pytest.raises(ctypes.ArgumentError, match="c_nvmlGpuInstancePlacement_t"):
            pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(dev, 19, ctypes.byref(count))
        small = (pynvml.c_nvmlGpuInstancePlacement_t * 2)()
        with pytest.raises(pynvml.NVMLError):
            pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(dev, 19, small,
                                                              ctypes.byref(count))
        assert fake.violations and "placements buffer holds 2" in fake.violations[0]
        fake.violations.clear()
        # NULL placements only asks for the count
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(dev, 19, None, ctypes.byref(count))
        assert count.value == 7
        ci = pynvml.nvmlGpuInstanceCreateComputeInstance(
            gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE)
        with pytest.raises(pynvml.NVMLError_InUse):  # compute instances still there
            pynvml.nvmlGpuInstanceDestroy(gi)
        with pytest.raises(ctypes.ArgumentError, match="LP_struct_c_nvmlGpuInstance_t"):
            pynvml.nvmlGpuInstanceDestroy(ci)  # CI handle as a GI
        pynvml.nvmlComputeInstanceDestroy(ci)
        pynvml.nvmlGpuInstanceDestroy(gi)
        with pytest.raises(pynvml.NVMLError_InvalidArgument):  # stale handle
            pynvml.nvmlGpuInstanceDestroy(gi)
        assert "not valid" in fake.violations.pop()
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            pynvml.nvmlDeviceCreateGpuInstance(dev, 19)  # not exported by the fake
    finally:
        pynvml.nvmlShutdown()


# -- devices and catalogue --------------------------------------------------------------
def test_backend_satisfies_the_interface_over_real_pynvml(backend, fake):
    assert isinstance(backend, GpuBackend)
    assert backend.nv is pynvml
    assert fake.called("nvmlInitWithFlags") == 1 and fake.init_count == 1


def test_list_gpus(backend, fake):
    gpus = backend.list_gpus()
    assert [(g.index, g.model, g.name, g.memory_mib, g.mig_enabled) for g in gpus] == [
        (0, "H100-80GB", "NVIDIA H100 80GB HBM3", H100.memory_mib, True),
        (1, "H100-80GB", "NVIDIA H100 80GB HBM3", H100.memory_mib, True)]
    assert [g.uuid for g in gpus] == [fake.gpu(0).uuid, fake.gpu(1).uuid]
    assert all(g.uuid.startswith("GPU-") for g in gpus)


def test_catalogue_read_from_nvml_equals_the_static_table(backend, fake, caplog):
    with caplog.at_level(logging.WARNING, logger="gpus.nvml.catalog"):
        cat = backend.catalog(0)
    assert "differs" not in caplog.text
    assert diff_catalogs(H100, cat) == []
    # ids, indices, slices, counts, placements, names, and the table's order
    assert cat.profiles == H100.profiles
    assert (cat.model, cat.memory_slices, cat.compute_slices) == ("H100-80GB", 8, 7)
    assert (cat.memory_mib, cat.sm_count) == (H100.memory_mib, H100.sm_count)
    assert cat == H100  # so both share one precomputed partition space
    # profile info is asked by NVML_GPU_INSTANCE_PROFILE_* index, placements by profile id
    assert fake.called("nvmlDeviceGetGpuInstanceProfileInfoV") == \
        pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT
    placement_ids = {a[1] for n, a in fake.calls
                     if n == "nvmlDeviceGetGpuInstancePossiblePlacements_v2"}
    assert placement_ids == {p.profile_id for p in H100.profiles}


# -- creating and destroying -----------------------------------------------------------
def test_every_full_configuration_round_trips(backend, fake):
    space = get_space(H100)
    configs = space.full_configurations()
    assert configs
    for cfg in configs:
        made = [backend.create_instance(0, p.profile, p.start, owner="job1") for p in cfg]
        assert _placements(backend) == cfg
        assert fake.layout(0) == [(p.profile, p.start) for p in cfg]
        listed = {i.gi_id: i for i in backend.list_instances(0)}
        uuids = backend.device_uuids(0)
        for inst in made:
            prof = H100.profile(inst.profile)
            gi = fake.gpu(0).gis[inst.gi_id]
            assert (gi.profile.name, gi.start, gi.size) == (inst.profile, inst.start,
                                                             prof.memory_slices)
            assert inst.size == prof.memory_slices and inst.memory_mib == prof.memory_mib
            assert inst.ci_id == 0 and inst.uuid == gi.cis[0].uuid == uuids[inst.gi_id]
            assert inst.uuid.startswith("MIG-") and inst.owner == "job1"
            got = listed[inst.gi_id]
            assert (got.profile, got.start, got.size, got.ci_id, got.uuid, got.busy) == (
                inst.profile, inst.start, inst.size, 0, inst.uuid, False)
            # one full-size compute instance over the whole GPU instance
            assert [ci.slices for ci in gi.cis.values()] == [prof.compute_slices]
        for inst in backend.list_instances(0):
            backend.destroy_instance(0, inst.gi_id)
        assert backend.list_instances(0) == [] and fake.gpu(0).gis == {}
        assert backend.device_uuids(0) == {}
    assert fake.gpu(1).gis == {}  # the other GPU was never touched


def test_two_gpus_are_independent(backend, fake):
    a = backend.create_instance(0, "7g.80gb", 0)
    b = backend.create_instance(1, "3g.40gb", 4)
    assert a.gi_id == 0  # GI id 0 is a valid id, not "missing"
    assert [i.profile for i in backend.list_instances(0)] == ["7g.80gb"]
    assert [i.profile for i in backend.list_instances(1)] == ["3g.40gb"]
    assert backend.device_uuids(0) == {a.gi_id: a.uuid}
    assert backend.device_uuids(1) == {b.gi_id: b.uuid}
    assert a.uuid != b.uuid
    backend.destroy_instance(0, a.gi_id)
    assert [i.profile for i in backend.list_instances(1)] == ["3g.40gb"]


def test_overlap_and_limits_are_insufficient_resources(backend, fake):
    backend.create_instance(0, "3g.40gb", 4)
    with pytest.raises(InsufficientResourcesError, match=r"GPU 0: create 1g.10gb@6.*overlaps"):
        backend.create_instance(0, "1g.10gb", 6)
    backend.create_instance(0, "1g.10gb+me", 0)
    with pytest.raises(PlacementOccupiedError):  # same class as the simulated backend
        backend.create_instance(0, "4g.40gb", 0)
    with pytest.raises(InsufficientResourcesError):  # one +me instance (instanceCount 1)
        backend.create_instance(0, "1g.10gb+me", 1)
    assert fake.layout(0) == [("1g.10gb+me", 0), ("3g.40gb", 4)]
    assert len(backend.list_instances(0)) == 2  # refusals left no half-made instance


def test_placement_the_driver_does_not_list_is_invalid_argument(backend, fake):
    backend.catalog(0)  # cached: the backend believes 1g.20gb may start at 6
    from dataclasses import replace
    drv = fake.gpu(0)
    drv.catalog = replace(drv.catalog, profiles=tuple(
        replace(p, placement_starts=(0, 2, 4)) if p.name == "1g.20gb" else p
        for p in drv.catalog.profiles))
    with pytest.raises(InvalidPlacementError, match=r"GPU 0: create 1g.20gb@6.*gpupack mig"):
        backend.create_instance(0, "1g.20gb", 6)
    assert fake.layout(0) == []


def test_invalid_start_and_unknown_gi_are_refused(backend, fake):
    with pytest.raises(InvalidPlacementError, match="valid starts are"):
        backend.create_instance(0, "2g.20gb", 1)
    assert fake.called("nvmlDeviceCreateGpuInstanceWithPlacement") == 0
    with pytest.raises(NotFoundError, match="GPU 0: destroy GPU instance 9"):
        backend.destroy_instance(0, 9)


def test_failed_compute_instance_rolls_back_the_gpu_instance(backend, fake):
    fake.fail["nvmlGpuInstanceCreateComputeInstance"] = ERROR_INSUFFICIENT_RESOURCES
    with pytest.raises(InsufficientResourcesError, match="compute instance"):
        backend.create_instance(0, "2g.20gb", 2)
    assert fake.gpu(0).gis == {} and backend.list_instances(0) == []


# -- in use, processes, memory -----------------------------------------------------------
def test_busy_instance_is_reported_and_destroy_is_in_use(backend, fake):
    inst = backend.create_instance(0, "3g.40gb", 4)
    other = backend.create_instance(0, "1g.10gb", 0)
    pid = fake.start_process(0, inst.gi_id, 3 * 1024 * MIB)
    busy = {i.gi_id: i.busy for i in backend.list_instances(0)}
    assert busy == {inst.gi_id: True, other.gi_id: False}
    mem = backend.process_memory(0, inst.gi_id)
    assert [(m.device_uuid, m.owner, m.used_bytes) for m in mem] == [
        (inst.uuid, str(pid), 3 * 1024 * MIB)]
    assert [m.owner for m in backend.process_memory(0)] == [str(pid)]
    assert backend.process_memory(0, other.gi_id) == []
    with pytest.raises(InUseError, match=rf"GPU 0: destroy GPU instance {inst.gi_id}.*wait"):
        backend.destroy_instance(0, inst.gi_id)
    # nothing was torn down: the compute instance and the MIG device are still there
    assert backend.device_uuids(0)[inst.gi_id] == inst.uuid
    fake.stop_processes(0)
    backend.destroy_instance(0, inst.gi_id)
    assert fake.layout(0) == [("1g.10gb", 0)]
    with pytest.raises(NotFoundError):
        backend.process_memory(0, inst.gi_id)


def test_destroy_removes_compute_instances_made_by_others(backend, fake):
    """A GPU instance split into several compute instances (e.g. by nvidia-smi)."""
    inst = backend.create_instance(0, "3g.40gb", 0)
    fake.gpu(0).gis[inst.gi_id].cis.clear()  # as if its CI had been destroyed elsewhere
    fake.gpu(0).mig_slots.clear()
    pynvml.nvmlInit()
    try:
        dev = pynvml.nvmlDeviceGetHandleByIndex(0)
        gi = pynvml.nvmlDeviceGetGpuInstanceById(dev, inst.gi_id)
        for _ in range(3):
            pynvml.nvmlGpuInstanceCreateComputeInstance(
                gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE)
    finally:
        pynvml.nvmlShutdown()
    assert len(fake.gpu(0).gis[inst.gi_id].cis) == 3
    backend.destroy_instance(0, inst.gi_id)
    assert fake.gpu(0).gis == {} and fake.gpu(0).mig_slots == {}


# -- MIG device UUIDs -----------------------------------------------------------------------
def test_mig_device_uuids_follow_index_holes_and_recreation(backend, fake):
    a = backend.create_instance(0, "2g.20gb", 0)
    b = backend.create_instance(0, "2g.20gb", 2)
    c = backend.create_instance(0, "2g.20gb", 4)
    assert backend.device_uuids(0) == {a.gi_id: a.uuid, b.gi_id: b.uuid, c.gi_id: c.uuid}
    assert len({a.uuid, b.uuid, c.uuid}) == 3
    backend.destroy_instance(0, a.gi_id)  # leaves MIG device index 0 empty
    assert sorted(fake.gpu(0).mig_slots) == [1, 2]
    assert backend.device_uuids(0) == {b.gi_id: b.uuid, c.gi_id: c.uuid}
    a2 = backend.create_instance(0, "2g.20gb", 0)
    assert a2.uuid != a.uuid  # a new compute instance is a new MIG device
    assert backend.device_uuids(0)[a2.gi_id] == a2.uuid


# -- permissions, MIG mode, library ---------------------------------------------------------
def test_no_permission_for_changes_but_reading_works(monkeypatch):
    fake = _make(monkeypatch, models=["H100-80GB"], privileged=False)
    be = NvmlBackend()
    try:
        gpus = be.list_gpus()  # aggregate memory needs privileges in MIG mode
        assert gpus[0].mig_enabled and gpus[0].memory_mib == H100.memory_mib
        assert diff_catalogs(H100, be.catalog(0)) == []
        with pytest.raises(NoPermissionError, match="GPU 0: create 1g.10gb@0.*root"):
            be.create_instance(0, "1g.10gb", 0)
        fake.privileged = True
        inst = be.create_instance(0, "1g.10gb", 0)
        fake.privileged = False
        assert [i.gi_id for i in be.list_instances(0)] == [inst.gi_id]
        with pytest.raises(NoPermissionError, match="root"):
            be.destroy_instance(0, inst.gi_id)
        with pytest.raises(NoPermissionError):
            be.set_mig_mode(0, False)
        assert fake.layout(0) == [("1g.10gb", 0)]
    finally:
        be.close()
    _check_clean(fake)


def test_aggregate_queries_on_a_mig_parent_need_privileges(monkeypatch):
    fake = _make(monkeypatch, models=["H100-80GB", "H100-80GB"])
    fake.gpu(1).mig_current = fake.gpu(1).mig_pending = MIG_DISABLE
    pynvml.nvmlInit()
    try:
        parent = pynvml.nvmlDeviceGetHandleByIndex(0)
        placement = pynvml.c_nvmlGpuInstancePlacement_t(0, 1)
        gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(parent, 19,
                                                             ctypes.byref(placement))
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
        gi_id = pynvml.nvmlGpuInstanceGetInfo(gi).id
        pid = fake.start_process(0, gi_id, 512 * MIB)
        whole = fake.start_process(1, None, 256 * MIB)
        fake.privileged = False
        with pytest.raises(pynvml.NVMLError_NoPermission):
            pynvml.nvmlDeviceGetMemoryInfo(parent)
        with pytest.raises(pynvml.NVMLError_NoPermission):
            pynvml.nvmlDeviceGetComputeRunningProcesses(parent)
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)  # its own queries work
        assert pynvml.nvmlDeviceGetMemoryInfo(mig).used == 512 * MIB
        assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(mig)] == [pid]
        mig_off = pynvml.nvmlDeviceGetHandleByIndex(1)  # and so do a GPU's with MIG off
        assert pynvml.nvmlDeviceGetMemoryInfo(mig_off).used == 256 * MIB
        assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(mig_off)] == [whole]
    finally:
        pynvml.nvmlShutdown()
    _check_clean(fake)


def test_mig_disabled(monkeypatch):
    fake = _make(monkeypatch, models=["H100-80GB"], mig_enabled=False)
    be = NvmlBackend()
    try:
        assert be.mig_mode(0) is False and be.list_gpus()[0].mig_enabled is False
        with pytest.raises(MigDisabledError, match="-mig 1"):
            be.create_instance(0, "1g.10gb", 0)
        with pytest.raises(MigDisabledError):
            be.read_catalog(0)  # NVML lists no MIG profile with MIG off
        assert be.catalog(0).model == "H100-80GB"  # the static table (an MPS node needs its shares)
        with pytest.raises(MigDisabledError):
            be.list_instances(0)
        assert fake.called("nvmlDeviceCreateGpuInstanceWithPlacement") == 0
        assert be.device_uuids(0) == {}
        pid = fake.start_process(0, None, 5 * MIB)
        assert [(m.device_uuid, m.owner, m.used_bytes) for m in be.process_memory(0)] == [
            (fake.gpu(0).uuid, str(pid), 5 * MIB)]
        # the driver's own answer when the backend's check is bypassed
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
                h, 19, ctypes.byref(pynvml.c_nvmlGpuInstancePlacement_t(0, 1)))
        fake.stop_processes(0)
        be.set_mig_mode(0, True)
        assert be.mig_mode(0) is True
        inst = be.create_instance(0, "4g.40gb", 0)
        assert inst.uuid.startswith("MIG-")
    finally:
        be.close()
    _check_clean(fake)


def test_mig_mode_change_refused_while_in_use(backend, fake):
    inst = backend.create_instance(0, "1g.10gb", 3)
    with pytest.raises(InUseError, match="GPU 0"):
        backend.set_mig_mode(0, False)
    assert backend.mig_mode(0) is True
    backend.destroy_instance(0, inst.gi_id)
    backend.set_mig_mode(0, False)
    assert backend.mig_mode(0) is False
    assert fake.gpu(0).mig_pending == pynvml.NVML_DEVICE_MIG_DISABLE


def test_mig_mode_change_pending_until_reset(backend, fake, caplog):
    fake.gpu(1).reset_required = True
    with caplog.at_level(logging.WARNING, logger="gpus.nvml.backend"):
        backend.set_mig_mode(1, False)
    assert "reset" in caplog.text
    assert backend.mig_mode(1) is True  # still on until the GPU is reset
    assert fake.gpu(1).mig_pending == pynvml.NVML_DEVICE_MIG_DISABLE


def test_driver_not_loaded(monkeypatch):
    _make(monkeypatch, init_error=ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(BackendUnavailableError, match="driver loaded"):
        NvmlBackend()


def test_library_not_found(monkeypatch):
    _make(monkeypatch)
    monkeypatch.setattr(pynvml, "nvmlLib", None)  # as on a node without the driver
    with pytest.raises(BackendUnavailableError, match="simulated backend"):
        NvmlBackend()


def test_fake_rejects_a_struct_passed_by_value(fake):
    pynvml.nvmlInit()
    try:
        dev = pynvml.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
                dev, 0, pynvml.c_nvmlGpuInstancePlacement_t(0, 8))
        assert "passed by value" in fake.violations.pop()
        assert fake.gpu(0).gis == {}
    finally:
        pynvml.nvmlShutdown()


def test_gpu_without_mig_support(backend, fake):
    g = fake.gpu(1)
    g.mig_capable = False
    g.mig_current = g.mig_pending = pynvml.NVML_DEVICE_MIG_DISABLE
    assert [x.mig_enabled for x in backend.list_gpus()] == [True, False]
    with pytest.raises(MigDisabledError):
        backend.create_instance(1, "1g.10gb", 0)
    with pytest.raises(MigDisabledError, match="does not support MIG"):
        backend.set_mig_mode(1, True)


def test_partition_state_follows_the_instances_nvml_lists(backend, fake):
    """The node agent places MIG slices from `partition_state`: on NVML it is the instances
    the driver lists, as placements (a full GPU after 3g@4 + 4g@0 accepts nothing more)."""
    assert backend.partition_state(0).mask == 0
    backend.create_instance(0, "3g.40gb", 4)
    state = backend.partition_state(0)
    assert not state.is_full and not state.can_alloc("4g.40gb", 4)
    assert state.can_alloc("4g.40gb", 0)
    backend.create_instance(0, "4g.40gb", 0)
    assert backend.partition_state(0).is_full
    assert backend.partition_state(1).mask == 0  # the other GPU is untouched
