"""Error mapping of the NVML backend (pynvml replaced by stubs; no GPU here)."""
from __future__ import annotations

import types

import pynvml
import pytest

from mig.errors import (
    BackendUnavailableError, InsufficientResourcesError, InUseError, InvalidPlacementError,
    MigDisabledError, NoPermissionError,
)
from gpus.nvml.backend import NvmlBackend


def _err(code):
    return pynvml.NVMLError(code)


@pytest.fixture
def nv(mocker):
    """A pynvml look-alike: real constants, structs and error classes, stubbed calls."""
    fake = types.SimpleNamespace(**{k: getattr(pynvml, k) for k in dir(pynvml)
                                    if k.isupper() or k.startswith(("c_nvml", "NVMLError"))})
    for name in dir(pynvml):
        if name.startswith("nvml"):
            setattr(fake, name, mocker.MagicMock(name=name))
    fake.nvmlDeviceGetName.return_value = "NVIDIA H100 80GB HBM3"
    fake.nvmlDeviceGetMigMode.return_value = [pynvml.NVML_DEVICE_MIG_ENABLE] * 2
    fake.nvmlDeviceGetMaxMigDeviceCount.return_value = 0
    return fake


@pytest.fixture
def backend(nv, mocker):
    be = NvmlBackend(nvml=nv)
    from mig.catalog import load_catalog

    mocker.patch.object(be, "read_catalog", return_value=load_catalog("H100-80GB"))
    return be


def test_driver_not_loaded_is_backend_unavailable(nv):
    nv.nvmlInit.side_effect = _err(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(BackendUnavailableError, match="driver loaded"):
        NvmlBackend(nvml=nv)


def test_create_passes_memory_slices_and_profile_id(backend, nv):
    gi_info = types.SimpleNamespace(id=3)
    nv.nvmlGpuInstanceGetInfo.return_value = gi_info
    nv.nvmlComputeInstanceGetInfo.return_value = types.SimpleNamespace(id=0)
    nv.nvmlGpuInstanceGetComputeInstanceProfileInfo.return_value = types.SimpleNamespace(id=0)
    inst = backend.create_instance(0, "1g.20gb", 4)
    args = nv.nvmlDeviceCreateGpuInstanceWithPlacement.call_args.args
    assert args[1] == 15  # profile id, not the profile index (9)
    placement = args[2]._obj
    assert (placement.start, placement.size) == (4, 2)  # memory slices, not sliceCount 1
    ci_args = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo.call_args.args
    assert ci_args[1] == pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE
    assert (inst.gi_id, inst.ci_id, inst.size) == (3, 0, 2)


@pytest.mark.parametrize("code,cls,text", [
    (pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, InsufficientResourcesError, "overlaps"),
    (pynvml.NVML_ERROR_NO_PERMISSION, NoPermissionError, "needs root"),
    (pynvml.NVML_ERROR_NOT_SUPPORTED, MigDisabledError, "MIG mode is off"),
    (pynvml.NVML_ERROR_INVALID_ARGUMENT, InvalidPlacementError, "gpupack mig catalog"),
])
def test_create_errors_are_mapped_and_name_the_placement(backend, nv, code, cls, text):
    nv.nvmlDeviceCreateGpuInstanceWithPlacement.side_effect = _err(code)
    with pytest.raises(cls, match=text) as ei:
        backend.create_instance(0, "3g.40gb", 4)
    assert "GPU 0: create 3g.40gb@4" in str(ei.value)


def test_failed_compute_instance_rolls_back_the_gpu_instance(backend, nv):
    nv.nvmlGpuInstanceGetComputeInstanceProfileInfo.return_value = types.SimpleNamespace(id=0)
    nv.nvmlGpuInstanceCreateComputeInstance.side_effect = _err(
        pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
    with pytest.raises(InsufficientResourcesError, match="compute instance"):
        backend.create_instance(0, "7g.80gb", 0)
    nv.nvmlGpuInstanceDestroy.assert_called_once()


def test_invalid_start_is_refused_before_nvml(backend, nv):
    with pytest.raises(InvalidPlacementError, match="valid starts are"):
        backend.create_instance(0, "4g.40gb", 4)
    nv.nvmlDeviceCreateGpuInstanceWithPlacement.assert_not_called()


def test_mig_disabled_is_refused_before_nvml(backend, nv):
    nv.nvmlDeviceGetMigMode.return_value = [pynvml.NVML_DEVICE_MIG_DISABLE] * 2
    with pytest.raises(MigDisabledError, match="-mig 1"):
        backend.create_instance(0, "3g.40gb", 4)
    nv.nvmlDeviceCreateGpuInstanceWithPlacement.assert_not_called()


def test_destroy_in_use(backend, nv):
    nv.nvmlGpuInstanceGetComputeInstanceProfileInfo.side_effect = _err(
        pynvml.NVML_ERROR_NOT_SUPPORTED)
    nv.nvmlGpuInstanceDestroy.side_effect = _err(pynvml.NVML_ERROR_IN_USE)
    with pytest.raises(InUseError, match="GPU 0: destroy GPU instance 5.*wait for the job"):
        backend.destroy_instance(0, 5)


def test_destroy_compute_instance_in_use(backend, nv, mocker):
    nv.nvmlGpuInstanceGetComputeInstanceProfileInfo.return_value = types.SimpleNamespace(id=0)

    def one_ci(gi, pid, arr, count):
        count._obj.value = 1

    nv.nvmlGpuInstanceGetComputeInstances.side_effect = one_ci
    nv.nvmlComputeInstanceDestroy.side_effect = _err(pynvml.NVML_ERROR_IN_USE)
    with pytest.raises(InUseError, match="compute instance"):
        backend.destroy_instance(0, 1)
    nv.nvmlGpuInstanceDestroy.assert_not_called()


def test_catalogue_is_read_from_nvml_and_differences_are_logged(nv, caplog):
    from mig.catalog import load_catalog

    static = load_catalog("H100-80GB")
    by_index = {p.nvml_profile_index: p for p in static.profiles}

    def info(handle, index):
        p = by_index.get(index)
        if p is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mem = p.memory_mib + (64 if p.name == "7g.80gb" else 0)  # a driver reporting more
        return types.SimpleNamespace(
            id=p.profile_id, sliceCount=p.compute_slices, instanceCount=p.max_instances,
            multiprocessorCount=p.sm_count, memorySizeMB=mem, name=f"MIG {p.name}".encode())

    by_id = {p.profile_id: p for p in static.profiles}

    def placements(handle, pid, arr, count):
        p = by_id[pid]
        for k, s in enumerate(p.placement_starts):
            arr[k].start, arr[k].size = s, p.memory_slices
        count._obj.value = len(p.placement_starts)

    nv.nvmlDeviceGetGpuInstanceProfileInfo.side_effect = info
    nv.nvmlDeviceGetGpuInstancePossiblePlacements.side_effect = placements
    be = NvmlBackend(nvml=nv)
    with caplog.at_level("WARNING", logger="gpus.nvml.catalog"):
        cat = be.catalog(0)
    assert cat.model == "H100-80GB" and cat.memory_slices == 8
    assert cat.profile("1g.20gb").placement_starts == (0, 2, 4, 6)
    assert cat.profile("1g.20gb").memory_slices == 2
    assert "7g.80gb: memory_mib" in caplog.text
