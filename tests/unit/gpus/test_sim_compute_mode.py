"""Compute modes on the simulated GPU: the fake libnvidia-ml's nvmlDevice{Get,Set}ComputeMode
through the real pynvml, shared with the simulated GPU, which holds new CUDA contexts to them."""
from __future__ import annotations

import os

import pynvml
import pytest

from gpus.nvml.backend import NvmlBackend
from gpus.sim.backend import SimGpuBackend
from gpus.sim.nvml.shared import SimulatedNvml
from mig.errors import DevicesUnavailableError, MigEnabledError, NoPermissionError

ME, PARENT = str(os.getpid()), str(os.getppid())  # live pids: the driver keeps their contexts


@pytest.fixture
def whole(tmp_path, monkeypatch):
    lib = SimulatedNvml(tmp_path, "n1", gpus=["H100-80GB"], mig_enabled=False)
    lib.install(monkeypatch)
    backend = NvmlBackend()
    yield lib, backend, SimGpuBackend(tmp_path, "n1")
    backend.close()
    assert not lib.violations and not lib.errors


def test_the_mode_set_through_nvml_is_the_simulated_gpus(whole):
    lib, backend, sim = whole
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetComputeMode(h) == pynvml.NVML_COMPUTEMODE_DEFAULT
    backend.set_compute_mode(0, None, "EXCLUSIVE_PROCESS")
    assert pynvml.nvmlDeviceGetComputeMode(h) == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    assert sim.compute_mode(0) == "EXCLUSIVE_PROCESS"
    sim.set_compute_mode(0, None, "DEFAULT")
    assert backend.compute_mode(0) == "DEFAULT"


def test_nvml_refuses_what_it_refuses_on_hardware(whole):
    lib, backend, _sim = whole
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # EXCLUSIVE_THREAD: support removed
        pynvml.nvmlDeviceSetComputeMode(h, pynvml.NVML_COMPUTEMODE_EXCLUSIVE_THREAD)
    lib.privileged = False
    with pytest.raises(NoPermissionError, match="needs root"):
        backend.set_compute_mode(0, None, "EXCLUSIVE_PROCESS")
    assert backend.compute_mode(0) == "DEFAULT"  # reading needs no root


def test_on_a_mig_gpu_each_mig_device_has_its_own_mode(tmp_path, monkeypatch):
    lib = SimulatedNvml(tmp_path, "n1", gpus=["H100-80GB"], mig_enabled=True)
    lib.install(monkeypatch)
    backend = NvmlBackend()
    a, b = backend.create_instance(0, "3g.40gb", 4), backend.create_instance(0, "2g.20gb", 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceSetComputeMode(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)
    backend.set_compute_mode(0, a.gi_id, "EXCLUSIVE_PROCESS")
    sim = SimGpuBackend(tmp_path, "n1")
    assert (sim.compute_mode(0, a.gi_id), sim.compute_mode(0, b.gi_id)) == ("EXCLUSIVE_PROCESS", "DEFAULT")
    with pytest.raises(MigEnabledError):
        sim.compute_mode(0)
    backend.destroy_instance(0, a.gi_id)
    again = backend.create_instance(0, "3g.40gb", 4)
    assert backend.compute_mode(0, again.gi_id) == "DEFAULT"  # a new MIG device starts at DEFAULT
    backend.close()
    assert not lib.violations and not lib.errors


def test_exclusive_process_allows_one_context_shared_by_mps_clients(whole):
    _lib, _backend, sim = whole
    gpu = sim.list_gpus()[0].uuid
    sim.set_compute_mode(0, None, "EXCLUSIVE_PROCESS")
    sim.start_process(gpu, ME, mps=True)
    sim.start_process(gpu, PARENT, mps=True)  # another client of the MPS server's one context
    with pytest.raises(DevicesUnavailableError, match="busy or unavailable.*through its MPS server"):
        sim.start_process(gpu, "job-plain")
    sim.end_process(gpu, PARENT)
    sim.end_process(gpu, ME)
    sim.start_process(gpu, "999999999")  # a process that died without ending: its context is gone
    sim.start_process(gpu, ME)  # a plain process now holds the device ...
    with pytest.raises(DevicesUnavailableError, match=f"held by {ME}"):
        sim.start_process(gpu, PARENT, mps=True)  # ... and the MPS server cannot have it
    sim.end_process(gpu, ME)
    sim.set_compute_mode(0, None, "PROHIBITED")
    with pytest.raises(DevicesUnavailableError, match="PROHIBITED"):
        sim.start_process(gpu, ME, mps=True)
    sim.set_compute_mode(0, None, "DEFAULT")
    sim.start_process(gpu, ME)
    sim.start_process(gpu, PARENT)  # DEFAULT: any number of contexts


def test_an_mps_server_holds_the_exclusive_device_from_its_start(whole):
    """The server's context comes before any client's: a plain process after it is refused,
    the server after a plain process is refused (so its clients would be), and a server whose
    daemon is gone holds nothing."""
    _lib, backend, sim = whole
    backend.set_compute_mode(0, None, "EXCLUSIVE_PROCESS")
    gpu = sim.list_gpus()[0].uuid
    sim.open_mps_server(gpu, 4000001, int(ME))
    with pytest.raises(DevicesUnavailableError, match="held by MPS server 4000001"):
        sim.start_process(gpu, PARENT)
    sim.start_process(gpu, PARENT, mps=True)  # a client joins the server's context
    sim.end_process(gpu, PARENT)
    sim.close_mps_server(gpu, 4000001)
    sim.start_process(gpu, PARENT)  # the plain process first now
    with pytest.raises(DevicesUnavailableError, match=f"held by {PARENT}"):
        sim.open_mps_server(gpu, 4000002, int(ME))
    sim.end_process(gpu, PARENT)
    sim.open_mps_server(gpu, 4000003, 2**22 + 7)  # a daemon pid that does not run
    sim.start_process(gpu, PARENT)
