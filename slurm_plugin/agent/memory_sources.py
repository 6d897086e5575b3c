"""Sources of memory series, each behind the same small interface.

A source answers :meth:`MemorySource.sample` with a :class:`MemorySample` (or None when
nothing can be read now: process gone, no GPU, no torch). :func:`feed` passes one sample to
a :class:`~predictor.forecast.Forecaster`.

- :class:`NvmlProcessSource`: device memory of a job's processes through NVML (for the node
  agent). ``pynvml`` is imported on first use, or injected (a fake in tests).
- :class:`TorchProbe`: opt-in, inside a PyTorch program: ``torch.cuda.memory_stats()`` each
  step. Imports torch only when used; returns None when torch or CUDA is absent.
  ``TorchProbe().report(iterations)`` tells the node agent the allocator's allocated peak,
  which history keeps beside NVML's figure (the reserve of PyTorch's caching allocator is
  not what the job needs: `packer.need`).
- :class:`CgroupMemorySource`: ``memory.current``/``memory.peak`` of a Slurm job's cgroup v2
  (``memory.usage_in_bytes``/``memory.max_usage_in_bytes`` on v1), so the same forecast warns
  of host-memory OOM kills. The cgroup root is a parameter.
- :class:`ProcessRssSource`: resident set of processes from ``/proc`` (how the real series of
  ``predictor/data`` were recorded).

No subprocess, no module-level import of pynvml or torch.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

log = logging.getLogger(__name__)

__all__ = [
    "MemorySample",
    "MemorySource",
    "NvmlProcessSource",
    "TorchProbe",
    "CgroupMemorySource",
    "ProcessRssSource",
    "feed",
]


@dataclass(frozen=True)
class MemorySample:
    bytes: int  # memory in use now
    peak_bytes: int | None = None  # peak since start, when the source knows it
    reuse_ratio: float | None = None
    timestamp: float = 0.0  # time.time() of the reading


@runtime_checkable
class MemorySource(Protocol):
    name: str

    def sample(self) -> MemorySample | None: ...


def feed(source: MemorySource, forecaster, step: float):
    """Read ``source`` once and update ``forecaster`` at ``step``; the forecast, or None when
    the source had nothing. The peak since start is used when the source reports one."""
    s = source.sample()
    if s is None:
        return None
    value = s.peak_bytes if s.peak_bytes is not None else s.bytes
    return forecaster.update(step, value, s.reuse_ratio)


# ----------------------------------------------------------------------------- NVML
class NvmlProcessSource:
    """Device memory used by ``pids`` (a collection, or a callable returning one, e.g. the
    job's current processes) on one GPU or MIG device, by index or UUID (``MIG-...``)."""

    def __init__(self, device: int | str, pids: Iterable[int] | Callable[[], Iterable[int]], nvml=None):
        self.device = device
        self._pids = pids
        self._nvml = nvml
        self._handle = None
        self.name = f"nvml:{device}"

    def _lib(self):
        if self._nvml is None:
            import pynvml  # the NVML binding is imported only when this source is used

            self._nvml = pynvml
        return self._nvml

    def _device(self):
        if self._handle is None:
            nv = self._lib()
            nv.nvmlInit()
            if isinstance(self.device, str):
                self._handle = nv.nvmlDeviceGetHandleByUUID(self.device)
            else:
                self._handle = nv.nvmlDeviceGetHandleByIndex(int(self.device))
        return self._handle

    def sample(self) -> MemorySample | None:
        pids = set(self._pids() if callable(self._pids) else self._pids)
        try:
            handle = self._device()
            procs = self._lib().nvmlDeviceGetComputeRunningProcesses(handle)
        except Exception as exc:  # NVMLError and friends: the agent logs and carries on
            log.warning("%s: cannot read per-process memory: %s", self.name, exc)
            return None
        used = [p.usedGpuMemory for p in procs if p.pid in pids and p.usedGpuMemory is not None]
        if not used:
            return None
        return MemorySample(bytes=int(sum(used)), timestamp=time.time())


# ---------------------------------------------------------------------------- torch
class TorchProbe:
    """Opt-in probe for a PyTorch training or inference loop::

        probe = TorchProbe(forecaster=Forecaster(capacity, horizon))
        for step, batch in enumerate(loader):
            ...
            forecast = probe.step(step)   # None when torch/CUDA is absent

    ``bytes`` is ``allocated_bytes.all.current`` plus ``context_bytes`` (what can cause an
    OOM: allocated memory and the CUDA context, not the allocator's reserve); ``peak_bytes`` the
    allocator's own ``allocated_bytes.all.peak`` plus the same constant.
    """

    def __init__(self, device=None, forecaster=None, context_bytes: int = 0, torch_module=None):
        self.device = device
        self.forecaster = forecaster
        self.context_bytes = int(context_bytes)
        self._torch = torch_module
        self._unavailable = False
        self._steps = 0
        self.name = f"torch:{device if device is not None else 'current'}"

    def _lib(self):
        if self._torch is None and not self._unavailable:
            try:
                import torch
            except ImportError:
                log.info("torch is not installed; the memory probe does nothing")
                self._unavailable = True
                return None
            self._torch = torch
        return self._torch

    def sample(self) -> MemorySample | None:
        torch = self._lib()
        if torch is None:
            return None
        try:
            if not torch.cuda.is_available():
                if not self._unavailable:
                    log.info("CUDA is not available; the memory probe does nothing")
                self._unavailable = True
                return None
            stats = torch.cuda.memory_stats(self.device)
        except Exception as exc:  # never break the user's program
            log.warning("torch memory probe failed: %s", exc)
            return None
        current = stats.get("allocated_bytes.all.current")
        if current is None:
            return None
        peak = stats.get("allocated_bytes.all.peak")
        return MemorySample(
            bytes=int(current) + self.context_bytes,
            peak_bytes=None if peak is None else int(peak) + self.context_bytes,
            timestamp=time.time(),
        )

    def report(self, iterations: int, env: dict[str, str] | None = None, ask=None) -> bool:
        """Tell the node agent the allocator's peak of allocated bytes (``alloc_peak_bytes``,
        with ``iterations`` done so far, which must not go backwards), through the socket and
        token the step was given (``GPUPACK_AGENT_SOCKET``, ``GPUPACK_REPORT_TOKEN``,
        ``SLURM_JOB_ID``). The helper then sizes the workload on what it allocated, not on
        what the caching allocator reserved (`packer.need`). Whether it was taken; never raises.
        One call at the end of the run is enough (the peak is the run's own); more are fine,
        at most every 0.1 s."""
        import os

        env = dict(os.environ if env is None else env)
        sock, token, job = env.get("GPUPACK_AGENT_SOCKET"), env.get("GPUPACK_REPORT_TOKEN"), env.get("SLURM_JOB_ID", "")
        sample = self.sample()
        if not sock or not token or not job.isdigit() or sample is None:
            return False
        peak = sample.peak_bytes if sample.peak_bytes is not None else sample.bytes
        body = {"op": "report", "job_id": int(job), "token": token, "iterations": max(int(iterations), 0),
                "alloc_peak_bytes": max(int(peak) - self.context_bytes, 0)}
        if ask is None:
            from slurm_plugin.agent.client import ask
        try:
            answer = ask(sock, body, 1.0)
        except OSError as exc:
            log.info("cannot report the allocator's peak to the node agent: %s", exc)
            return False
        return answer.get("status") == "ok"

    def step(self, step: float | None = None):
        """Sample once; with a forecaster, update it and return the forecast."""
        self._steps += 1
        sample = self.sample()
        if sample is None or self.forecaster is None:
            return None
        value = sample.peak_bytes if sample.peak_bytes is not None else sample.bytes
        return self.forecaster.update(self._steps if step is None else step, value)


# --------------------------------------------------------------------------- cgroup
class CgroupMemorySource:
    """Memory of a Slurm job's cgroup.

    Looks for the job's directory under ``root`` (default ``/sys/fs/cgroup``): cgroup v2 as
    Slurm's cgroup/v2 plugin lays it out (``system.slice/slurmstepd.scope/job_<id>``, also
    the ``<nodename>_slurmstepd.scope`` of multiple-slurmd nodes), cgroup v1
    (``memory/slurm*/uid_*/job_<id>``), or an explicit ``path``.
    """

    V2_PATTERNS = ("system.slice/slurmstepd.scope/job_{id}", "system.slice/*slurmstepd.scope/job_{id}", "**/job_{id}")
    V1_PATTERNS = ("memory/slurm*/uid_*/job_{id}", "memory/**/job_{id}")

    def __init__(self, job_id: int | str, root: str | Path = "/sys/fs/cgroup", path: str | Path | None = None):
        self.job_id = str(job_id)
        if not self.job_id.isdigit():
            raise ValueError(f"a Slurm job id is a number, got {job_id!r}")
        self.root = Path(root)
        self._path = Path(path) if path is not None else None
        self._peak_seen = 0
        self.name = f"cgroup:job_{self.job_id}"

    def find(self) -> Path | None:
        """The job's cgroup directory, or None when it does not exist (yet, or any more)."""
        if self._path is not None and self._path.is_dir():
            return self._path
        for pattern in self.V2_PATTERNS + self.V1_PATTERNS:
            for hit in sorted(self.root.glob(pattern.format(id=self.job_id))):
                if hit.is_dir() and (
                    (hit / "memory.current").exists() or (hit / "memory.usage_in_bytes").exists()
                ):
                    self._path = hit
                    return hit
        return None

    @staticmethod
    def _read_int(path: Path) -> int | None:
        try:
            text = path.read_text(encoding="ascii").strip()
        except (FileNotFoundError, PermissionError, OSError):
            return None
        if text == "max":
            return None
        try:
            return int(text.split()[0])
        except (ValueError, IndexError):
            log.warning("%s: unexpected content %r", path, text[:40])
            return None

    def limit_bytes(self) -> int | None:
        """The job's memory limit (``memory.max``, v1 ``memory.limit_in_bytes``); None if unlimited."""
        d = self.find()
        if d is None:
            return None
        value = self._read_int(d / "memory.max")
        if value is None:
            value = self._read_int(d / "memory.limit_in_bytes")
            if value is not None and value >= (1 << 62):  # v1 spells "unlimited" as a huge number
                value = None
        return value

    def sample(self) -> MemorySample | None:
        d = self.find()
        if d is None:
            return None
        current = self._read_int(d / "memory.current")
        peak = self._read_int(d / "memory.peak")  # Linux >= 5.19
        if current is None:
            current = self._read_int(d / "memory.usage_in_bytes")
            peak = self._read_int(d / "memory.max_usage_in_bytes")
        if current is None:
            return None
        self._peak_seen = max(self._peak_seen, current, peak or 0)
        return MemorySample(bytes=current, peak_bytes=self._peak_seen, timestamp=time.time())


# ---------------------------------------------------------------------------- procfs
class ProcessRssSource:
    """Sum of ``VmRSS`` (and of ``VmHWM`` as the peak) of ``pids`` from ``/proc``."""

    def __init__(self, pids: Iterable[int] | Callable[[], Iterable[int]], proc_root: str | Path = "/proc"):
        self._pids = pids
        self.proc_root = Path(proc_root)
        self.name = "procfs"

    def sample(self) -> MemorySample | None:
        rss = hwm = 0
        found = False
        for pid in self._pids() if callable(self._pids) else self._pids:
            try:
                text = (self.proc_root / str(int(pid)) / "status").read_text(encoding="ascii", errors="replace")
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
            for line in text.splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1]) * 1024
                    found = True
                elif line.startswith("VmHWM:"):
                    hwm += int(line.split()[1]) * 1024
        if not found:
            return None
        return MemorySample(bytes=rss, peak_bytes=max(hwm, rss), timestamp=time.time())
