"""Utilisation counters through NVML: per-process samples on a whole GPU (the real pynvml
against the fake libnvidia-ml), and the clear refusal where only DCGM has the counter."""
from __future__ import annotations

from unittest import mock

import pytest

from fake_libnvml import FakeNvml
from mig.errors import CountersUnavailableError
from gpus.nvml.backend import NvmlBackend
from slurm_plugin.agent.counters import NVML_PROCESS, CounterReader
from slurm_plugin.agent.state import Assignment


def _backend(monkeypatch, mig_enabled: bool) -> tuple[FakeNvml, NvmlBackend]:
    fake = FakeNvml(["H100-80GB"], mig_enabled=mig_enabled)
    fake.install(monkeypatch)
    return fake, NvmlBackend()


def test_process_samples_newer_than_last_seen_are_read(monkeypatch):
    fake, be = _backend(monkeypatch, mig_enabled=False)
    pid = fake.start_process(0, None, 1 << 30)
    fake.gpu(0).processes[0].samples.extend([(1_000_000, 70, 40), (1_166_666, 64, 35), (1_333_333, 0, 0)])
    got = be.process_utilization(0)
    assert [(u.owner, u.at_us, u.sm_pct, u.mem_pct) for u in got] == [
        (str(pid), 1_000_000, 70, 40), (str(pid), 1_166_666, 64, 35), (str(pid), 1_333_333, 0, 0)]
    assert [u.at_us for u in be.process_utilization(0, 1_166_666)] == [1_333_333]
    assert be.process_utilization(0, 2_000_000) == []  # NVML: NOT_FOUND, no newer sample
    assert not fake.violations and not fake.errors


def test_agent_maps_pids_to_jobs_and_averages_a_round(monkeypatch):
    fake, be = _backend(monkeypatch, mig_enabled=False)
    pid = fake.start_process(0, None, 1 << 30)
    other = fake.start_process(0, None, 1 << 30)  # a process of no job of ours
    fake.gpu(0).processes[0].samples.extend([(1_000_000, 70, 40), (1_166_666, 60, 35)])
    fake.gpu(0).processes[1].samples.append((1_000_000, 99, 99))
    reader = CounterReader(be, pid_to_job=lambda p: {pid: 42, other: 7}.get(p))
    job = Assignment(42, "n1", 0, "mps", "mps:50", device_uuid=be.list_gpus()[0].uuid)
    (reading,) = reader.read([job]).values()
    assert reading.util_pct == 65.0 and reading.source == NVML_PROCESS and reading.samples == 2
    assert reader.read([job]) == {}  # nothing newer: no reading this round


def test_in_mig_mode_per_process_utilisation_is_refused_with_the_reason(monkeypatch):
    _fake, be = _backend(monkeypatch, mig_enabled=True)
    with pytest.raises(CountersUnavailableError, match="MIG mode.*DCGM"):
        be.process_utilization(0)


def test_activity_per_mig_instance_is_dcgm_only_and_the_agent_degrades():
    be = NvmlBackend(nvml=mock.MagicMock())  # never reaches the driver for this counter
    with pytest.raises(CountersUnavailableError, match="DCGM_FI_PROF_GR_ENGINE_ACTIVE"):
        be.instance_activity(0)
    reader = CounterReader(be)
    job = Assignment(5, "n1", 0, "mig", "mig:1g.10gb@0", gi_id=9, device_uuid="MIG-x")
    reading = reader.read([job])[5]
    assert reading.util_pct is None and reading.source.startswith("unavailable: no-dcgm: ")
    assert "DCGM" in reading.source and reader.unavailable == {0: ("no-dcgm", 1)}


def test_a_driver_without_process_samples_is_reported_as_unavailable(monkeypatch):
    fake, be = _backend(monkeypatch, mig_enabled=False)
    fake.start_process(0, None, 1 << 30)
    import pynvml

    with mock.patch.object(pynvml, "nvmlDeviceGetProcessUtilization",
                           side_effect=pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)):
        with pytest.raises(CountersUnavailableError, match="report their progress"):
            be.process_utilization(0)
