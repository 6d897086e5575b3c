"""The simulated GPU's counters: NVML-like per-process samples, DCGM-like per-instance activity."""
from __future__ import annotations

from statistics import median

import pytest

from mig.errors import CountersUnavailableError, MigDisabledError
from gpus.sim.backend import SimGpuBackend
from gpus.sim.counters import NVML_BUFFER, CounterNoise


def _whole(clock):
    gpu = SimGpuBackend(None, "n1", gpus=["H100-80GB"], mig_enabled=False, clock=lambda: clock[0])
    return gpu, gpu.list_gpus()[0].uuid


def test_process_samples_are_integer_noisy_and_follow_what_the_process_does():
    clock = [5000.0]
    gpu, uuid = _whole(clock)
    gpu.start_process(uuid, "7", "ResNet18", 70.0)
    clock[0] += 5
    first = gpu.process_utilization(0)
    assert {s.owner for s in first} == {"7"} and 25 <= len(first) <= 31  # ~6 a second
    assert all(isinstance(s.sm_pct, int) and 0 <= s.sm_pct <= 100 for s in first)
    assert len({s.sm_pct for s in first}) > 3  # noisy, not a constant
    assert median(s.sm_pct for s in first) == pytest.approx(70, abs=6)
    gpu.set_busy(uuid, "7", 35.0)  # slowed down by a neighbour: half as busy
    clock[0] += 5
    later = gpu.process_utilization(0, max(s.at_us for s in first))
    assert min(s.at_us for s in later) > max(s.at_us for s in first)  # only newer samples
    assert median(s.sm_pct for s in later) == pytest.approx(35, abs=6)
    again = gpu.process_utilization(0, max(s.at_us for s in first))
    assert again == later  # the driver's buffer: the same sample reads the same


def test_the_buffer_is_bounded_and_mig_mode_has_no_per_process_samples():
    clock = [5000.0]
    gpu, uuid = _whole(clock)
    gpu.start_process(uuid, "7", None, 50.0)
    clock[0] += 600
    assert len(gpu.process_utilization(0)) == NVML_BUFFER
    mig = SimGpuBackend(None, "n2", gpus=["H100-80GB"])
    with pytest.raises(CountersUnavailableError, match="MIG mode"):
        mig.process_utilization(0)
    with pytest.raises(MigDisabledError):
        gpu.instance_activity(0)


def test_instance_activity_is_per_gpu_instance_and_never_the_speed():
    clock = [5000.0]
    gpu = SimGpuBackend(None, "n1", gpus=["H100-80GB"], clock=lambda: clock[0],
                        noise=CounterNoise(dip_p=0.0))
    a = gpu.create_instance(0, "3g.40gb", 0, owner="1")
    b = gpu.create_instance(0, "3g.40gb", 4, owner="2")
    gpu.start_process(a.uuid, "1", "ResNet18", 69.0)
    values = []
    for _ in range(20):
        clock[0] += 1
        act = {x.gi_id: x.gr_active for x in gpu.instance_activity(0)}
        assert act[b.gi_id] == 0.0  # nothing runs there
        values.append(act[a.gi_id])
    assert median(values) == pytest.approx(0.69, abs=0.06) and len(set(values)) > 5
    assert gpu.neighbours(a.uuid, "1") == []
    gpu.start_process(b.uuid, "2", "LSTM", 77.0)
    assert gpu.neighbours(a.uuid, "1") == ["LSTM"]  # the same physical GPU
    gpu.forget("2")
    assert gpu.neighbours(a.uuid, "1") == []
