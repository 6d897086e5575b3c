"""The simulated GPU's libnvidia-ml: the fake NVML over the shared, file-backed state, read
by the real pynvml through the NVML backend, as the dev cluster's agents do."""
from __future__ import annotations

import os
import time

import pynvml
import pytest

from mig.errors import CountersUnavailableError, InUseError
from gpus.nvml.backend import NvmlBackend
from gpus.sim.counters import NVML_PERIOD_S, sm_sample
from gpus.sim.backend import SimGpuBackend
from gpus.sim.nvml.shared import SimulatedNvml

GIB = 1 << 30
ME = str(os.getpid())  # a live pid: the simulated workloads register their own


@pytest.fixture
def nvml(tmp_path, monkeypatch):
    lib = SimulatedNvml(tmp_path, "n1", gpus=["H100-80GB", "H100-80GB"])
    lib.install(monkeypatch)
    backend = NvmlBackend()
    yield lib, backend, SimGpuBackend(tmp_path, "n1")  # the workloads' view of the same GPU
    backend.close()
    assert not lib.violations and not lib.errors


def test_an_instance_made_through_nvml_is_the_simulated_gpus(nvml, tmp_path, monkeypatch):
    _lib, backend, sim = nvml
    inst = backend.create_instance(0, "3g.40gb", 4)
    seen = sim.list_instances(0)
    assert [(i.gi_id, i.profile, i.start, i.uuid) for i in seen] == [(inst.gi_id, "3g.40gb", 4, inst.uuid)]
    # another process (another library over the same folder) sees it and can destroy it
    SimulatedNvml(tmp_path, "n1").install(monkeypatch)
    other = NvmlBackend()
    assert [(i.gi_id, i.profile, i.start, i.uuid) for i in other.list_instances(0)] \
        == [(inst.gi_id, "3g.40gb", 4, inst.uuid)]
    other.destroy_instance(0, inst.gi_id)
    assert sim.list_instances(0) == []
    other.close()


def test_memory_per_process_with_real_pids(nvml):
    lib, backend, sim = nvml
    inst = backend.create_instance(0, "2g.20gb", 0)
    sim.start_process(inst.uuid, ME, "LSTM", 40.0)
    sim.alloc_memory(inst.uuid, ME, 5 * GIB)
    sim.alloc_memory(inst.uuid, "999999999", GIB)  # a pid that does not exist: freed by the driver
    procs = backend.process_memory(0, inst.gi_id)
    assert [(p.owner, p.used_bytes, p.device_uuid) for p in procs] == [(ME, 5 * GIB, inst.uuid)]
    assert backend.list_instances(0)[0].busy
    with pytest.raises(InUseError):
        backend.destroy_instance(0, inst.gi_id)  # NVML refuses while a process runs there
    sim.end_process(inst.uuid, ME)
    sim.free_memory(inst.uuid, ME)
    backend.destroy_instance(0, inst.gi_id)
    assert sim.list_instances(0) == []
    assert inst.uuid not in sim.snapshot()["gpus"][0]["memory"]  # its records went with it


def test_no_per_process_utilisation_in_mig_mode(nvml):
    _lib, backend, sim = nvml
    inst = backend.create_instance(0, "1g.10gb", 0)
    sim.start_process(inst.uuid, ME, "LSTM", 50.0)
    with pytest.raises(CountersUnavailableError):
        backend.process_utilization(0)
    with pytest.raises(CountersUnavailableError):
        backend.instance_activity(0)


def test_utilisation_samples_on_a_whole_gpu(tmp_path, monkeypatch):
    lib = SimulatedNvml(tmp_path, "n1", gpus=["H100-80GB"], mig_enabled=False)
    lib.install(monkeypatch)
    sim = SimGpuBackend(tmp_path, "n1")
    uuid = sim.list_gpus()[0].uuid
    sim.start_process(uuid, ME, "ResNet18", 80.0)
    backend = NvmlBackend()
    time.sleep(0.5)
    samples = backend.process_utilization(0)
    assert samples and {s.owner for s in samples} == {ME}
    # each sample is the simulated GPU's counter for that tick (what its workload keeps busy)
    for s in samples:
        tick = round(s.at_us / 1e6 / NVML_PERIOD_S)
        assert (s.sm_pct, s.mem_pct) == sm_sample(80.0, sim.noise, uuid, ME, tick)


def test_mps_clients_are_listed_only_by_the_mps_call(tmp_path, monkeypatch):
    lib = SimulatedNvml(tmp_path, "n1", gpus=["H100-80GB"], mig_enabled=False)
    lib.install(monkeypatch)
    sim = SimGpuBackend(tmp_path, "n1")
    uuid = sim.list_gpus()[0].uuid
    sim.start_process(uuid, ME, "LSTM", 30.0, mps=True)
    sim.alloc_memory(uuid, ME, 3 * GIB)
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(h) == []
    assert [(p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetMPSComputeRunningProcesses(h)] \
        == [(os.getpid(), 3 * GIB)]
    pynvml.nvmlShutdown()
    # the backend reads both, so an MPS share's memory is seen
    backend = NvmlBackend()
    assert [(p.owner, p.used_bytes) for p in backend.process_memory(0)] == [(ME, 3 * GIB)]
    assert not lib.violations and not lib.errors


def test_mig_mode_change_is_shared(nvml):
    _lib, backend, sim = nvml
    backend.set_mig_mode(1, False)
    assert not sim.mig_mode(1) and sim.mig_mode(0)
