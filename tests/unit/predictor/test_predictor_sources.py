import builtins
import types
from pathlib import Path

import pytest

from predictor.forecast import Forecaster
from slurm_plugin.agent.memory_sources import (
    CgroupMemorySource,
    MemorySource,
    NvmlProcessSource,
    ProcessRssSource,
    TorchProbe,
    feed,
)

GIB = 1 << 30


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_job_directory_current_and_peak(tmp_path):
    job = tmp_path / "system.slice" / "slurmstepd.scope" / "job_42"
    write(job / "memory.current", "1000\n")
    write(job / "memory.peak", "1500\n")
    write(job / "memory.max", "max\n")
    src = CgroupMemorySource(42, root=tmp_path)
    assert isinstance(src, MemorySource)
    assert src.find() == job
    s = src.sample()
    assert (s.bytes, s.peak_bytes) == (1000, 1500)
    assert src.limit_bytes() is None
    write(job / "memory.max", "4096\n")
    assert src.limit_bytes() == 4096
    # older kernels have no memory.peak: the source keeps its own running maximum
    (job / "memory.peak").unlink()
    write(job / "memory.current", "700\n")
    assert src.sample().peak_bytes == 1500
    f = Forecaster(2000, 10)
    assert feed(src, f, 1).observed_peak_bytes == 1500


def test_cgroup_multiple_slurmd_scope_and_v1(tmp_path):
    job = tmp_path / "system.slice" / "node3_slurmstepd.scope" / "job_7"
    write(job / "memory.current", "5\n")
    assert CgroupMemorySource("7", root=tmp_path).sample().bytes == 5
    v1 = tmp_path / "v1" / "memory" / "slurm" / "uid_1000" / "job_8"
    write(v1 / "memory.usage_in_bytes", "300\n")
    write(v1 / "memory.max_usage_in_bytes", "900\n")
    write(v1 / "memory.limit_in_bytes", "9223372036854771712\n")
    src = CgroupMemorySource(8, root=tmp_path / "v1")
    s = src.sample()
    assert (s.bytes, s.peak_bytes) == (300, 900)
    assert src.limit_bytes() is None


def test_cgroup_missing_job_and_bad_id(tmp_path):
    assert CgroupMemorySource(99, root=tmp_path).sample() is None
    with pytest.raises(ValueError, match="number"):
        CgroupMemorySource("../etc", root=tmp_path)


class FakeNvml:
    """A stateful fake of the few pynvml calls the source makes."""

    def __init__(self, procs):
        self.procs = procs
        self.inits = 0

    def nvmlInit(self):
        self.inits += 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("idx", i)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if not uuid.startswith("MIG-"):
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return ("uuid", uuid)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self.procs.get(handle, [])


def proc(pid, used):
    return types.SimpleNamespace(pid=pid, usedGpuMemory=used)


def test_nvml_sums_the_jobs_processes():
    nv = FakeNvml({("uuid", "MIG-abc"): [proc(1, 100), proc(2, 50), proc(3, 999), proc(4, None)]})
    src = NvmlProcessSource("MIG-abc", lambda: [1, 2, 4], nvml=nv)
    assert src.sample().bytes == 150
    assert src.sample().bytes == 150 and nv.inits == 1
    assert NvmlProcessSource(0, [1], nvml=nv).sample() is None  # no process of the job there
    assert NvmlProcessSource("GPU-missing", [1], nvml=FakeNvml({})).sample() is None  # error: logged


def test_torch_probe_is_harmless_without_torch(monkeypatch):
    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch":
            raise ImportError("no torch here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    probe = TorchProbe(forecaster=Forecaster(GIB, 10))
    assert probe.sample() is None
    assert probe.step() is None


def fake_torch(available=True, stats=None):
    cuda = types.SimpleNamespace(is_available=lambda: available, memory_stats=lambda device=None: stats or {})
    return types.SimpleNamespace(cuda=cuda)


def test_torch_probe_reads_memory_stats_each_step():
    stats = {"allocated_bytes.all.current": 100, "allocated_bytes.all.peak": 300}
    f = Forecaster(10_000, 100)
    probe = TorchProbe(forecaster=f, context_bytes=1000, torch_module=fake_torch(stats=stats))
    s = probe.sample()
    assert (s.bytes, s.peak_bytes) == (1100, 1300)
    fc = probe.step()
    assert fc.observed_peak_bytes == 1300 and fc.step == 1
    assert TorchProbe(torch_module=fake_torch(available=False)).sample() is None


def test_process_rss_from_a_fake_proc(tmp_path):
    write(tmp_path / "10" / "status", "Name:\tx\nVmHWM:\t    200 kB\nVmRSS:\t    100 kB\n")
    write(tmp_path / "11" / "status", "Name:\ty\nVmHWM:\t    20 kB\nVmRSS:\t    10 kB\n")
    s = ProcessRssSource([10, 11, 12], proc_root=tmp_path).sample()
    assert (s.bytes, s.peak_bytes) == (110 * 1024, 220 * 1024)
    assert ProcessRssSource([12], proc_root=tmp_path).sample() is None


def test_process_rss_of_this_process():
    import os

    s = ProcessRssSource([os.getpid()]).sample()
    assert s is not None and s.bytes > 0
