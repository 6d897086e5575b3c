"""The utilisation counters of the simulated GPU: what NVML and DCGM would report, with noise.

A process on the simulated GPU (a ``simgpu`` workload) says how busy it keeps the engines
(``busy_pct``: its utilisation alone times the speed it gets beside its neighbours); the
GPU never learns, and never exposes, how fast the job really is. The counters sample that
activity the way the hardware does:

- **per process on a whole GPU or MPS** (``nvmlDeviceGetProcessUtilization``): one sample
  every :data:`NVML_PERIOD_S` per process, ``smUtil``/``memUtil`` as integer percentages,
  with Gaussian noise of ``sm_sd_pct`` points and, now and then (``stall_p``), a stall
  sample (a data-loader wait or a host sync) at a fraction of the usual value; only
  samples newer than the caller's last-seen timestamp, at most :data:`NVML_BUFFER` each;
- **per MIG GPU instance** (DCGM ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``): the fraction of the
  period the graphics engine of the instance was busy (0.0-1.0), one value per
  :data:`DCGM_PERIOD_S`, with Gaussian noise of ``gr_sd`` (it is an average of fine
  counters, so quieter than NVML's samples).

What a process does also varies by itself, and both counters see it: a slow drift of its
activity (``drift_sd`` relative, new value every ``drift_period_s``, interpolated) and
now and then a pause of ``dip_s`` seconds at ``dip_level`` of its activity (a checkpoint,
an evaluation pass: with probability ``dip_p`` in each ``dip_every_s`` window). These are
what make a drop of utilisation ambiguous, and what the helper's threshold is chosen against.

The noise is a pure function of (seed, device, owner, sample tick): every reader sees the
same value for the same sample, as with a real driver's buffer.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from mig.backend import InstanceActivity, ProcessUtilization
from mig.errors import CountersUnavailableError, NotFoundError

NVML_PERIOD_S = 1.0 / 6.0  # the driver's utilisation sampling period on datacenter GPUs
NVML_BUFFER = 60  # samples per process kept by the driver (older ones are gone)
DCGM_PERIOD_S = 1.0  # DCGM profiling field update period (dcgmi dmon's default)


@dataclass(frozen=True)
class CounterNoise:
    """How noisy the simulated counters are (see the module docstring)."""

    sm_sd_pct: float = 5.0
    stall_p: float = 0.03
    gr_sd: float = 0.03
    seed: str = "gpupack"
    drift_sd: float = 0.04
    drift_period_s: float = 10.0
    dip_every_s: float = 60.0
    dip_p: float = 0.5
    dip_s: float = 3.0
    dip_level: float = 0.15


def _rng(noise: CounterNoise, *key: object) -> random.Random:
    return random.Random("|".join(str(k) for k in (noise.seed, *key)))


def activity_factor(noise: CounterNoise, device: str, owner: str, t: float) -> float:
    """How much of its usual activity a process has at time ``t`` (drift and pauses)."""
    window = math.floor(t / noise.dip_every_s)
    rng = _rng(noise, device, owner, "dip", window)
    if rng.random() < noise.dip_p:
        start = window * noise.dip_every_s + rng.uniform(0.0, noise.dip_every_s - noise.dip_s)
        if start <= t < start + noise.dip_s:
            return noise.dip_level
    knot = t / noise.drift_period_s
    k = math.floor(knot)
    a = _rng(noise, device, owner, "drift", k).gauss(0.0, noise.drift_sd)
    b = _rng(noise, device, owner, "drift", k + 1).gauss(0.0, noise.drift_sd)
    return max(0.0, 1.0 + a + (b - a) * (knot - k))


def sm_sample(busy_pct: float, noise: CounterNoise, device: str, owner: str, tick: int) -> tuple[int, int]:
    """(smUtil, memUtil) of one NVML sample of a process that keeps ``busy_pct`` busy."""
    rng = _rng(noise, device, owner, tick)
    busy_pct *= activity_factor(noise, device, owner, tick * NVML_PERIOD_S)
    value = busy_pct + rng.gauss(0.0, noise.sm_sd_pct)
    if rng.random() < noise.stall_p:
        value *= rng.uniform(0.0, 0.5)
    sm = int(round(min(100.0, max(0.0, value))))
    mem = int(round(min(100.0, max(0.0, 0.55 * value + rng.gauss(0.0, noise.sm_sd_pct / 2)))))
    return sm, mem


def nvml_ticks(since_s: float, now_s: float, started_s: float) -> range:
    """Sample ticks after ``since_s`` (and after the process started) up to ``now_s``."""
    last = math.floor(now_s / NVML_PERIOD_S)
    first = max(math.floor(since_s / NVML_PERIOD_S + 1e-6) + 1, math.ceil(started_s / NVML_PERIOD_S), last - NVML_BUFFER + 1)
    return range(first, last + 1)


def gr_sample(busy_fraction: float, noise: CounterNoise, device: str, tick: int) -> float:
    """DCGM_FI_PROF_GR_ENGINE_ACTIVE of one GPU instance over one period (0.0-1.0)."""
    rng = _rng(noise, device, "gr", tick)
    value = min(1.0, busy_fraction) + (rng.gauss(0.0, noise.gr_sd) if busy_fraction > 0 else 0.0)
    return round(min(1.0, max(0.0, value)), 4)


class SimCounters:
    """The processes of the simulated GPU and their counters (a part of
    :class:`gpus.sim.backend.SimGpuBackend`, which gives ``_txn``, ``_locate``, ``_gpu``,
    ``_require_mig``, ``_check_context``, ``clock``, ``noise`` and ``node``)."""

    def start_process(self, device_uuid: str, owner: str, workload: str | None = None,
                      busy_pct: float = 0.0, mps: bool = False,
                      mps_limit_bytes: int | None = None) -> None:
        """A process of ``owner`` (its pid, for the simulated NVML library) starts computing
        on a device (it made its CUDA context); ``mps``: as an MPS client, whose allocations
        past ``mps_limit_bytes`` (its MPS server's pinned device memory limit) the GPU refuses.
        DevicesUnavailableError when the device's compute mode allows no such context
        (:mod:`gpus.sim.compute_mode`)."""
        with self._txn(write=True) as doc:
            _, _, g, _ = self._locate(doc, device_uuid)
            self._check_context(g, device_uuid, owner, mps)  # the device's compute mode
            g.setdefault("processes", {}).setdefault(device_uuid, {})[owner] = {
                "workload": workload, "busy_pct": float(busy_pct), "since": self.clock(),
                "mps": bool(mps), "mps_limit": int(mps_limit_bytes) if mps_limit_bytes else None}

    def set_busy(self, device_uuid: str, owner: str, busy_pct: float) -> None:
        """How busy the process keeps the engines now (what the counters will sample)."""
        with self._txn(write=True) as doc:
            _, _, g, _ = self._locate(doc, device_uuid)
            proc = g.get("processes", {}).get(device_uuid, {}).get(owner)
            if proc is None:
                raise NotFoundError(f"no process of {owner} on {device_uuid}; start_process first")
            proc["busy_pct"] = max(0.0, min(100.0, float(busy_pct)))

    def end_process(self, device_uuid: str, owner: str) -> None:
        with self._txn(write=True) as doc:
            _, _, g, _ = self._locate(doc, device_uuid)
            g.get("processes", {}).get(device_uuid, {}).pop(owner, None)

    def neighbours(self, device_uuid: str, owner: str) -> list[str | None]:
        """Workloads of the other processes computing on the same physical GPU.

        Simulation physics, not a counter: the workload uses it to know how much it is
        slowed down. The measured pair slowdowns are applied to every process of the GPU,
        MIG slices included (the traces measured sharing; MIG isolation would lessen it)."""
        with self._txn() as doc:
            _, _, g, _ = self._locate(doc, device_uuid)
            return [p.get("workload") for dev, procs in sorted(g.get("processes", {}).items())
                    for who, p in sorted(procs.items()) if not (dev == device_uuid and who == owner)]

    def process_utilization(self, gpu_index: int, since_us: int = 0) -> list[ProcessUtilization]:
        """Per-process utilisation samples newer than ``since_us`` on a whole GPU (NVML's
        nvmlDeviceGetProcessUtilization); refused on a GPU in MIG mode, as NVML does."""
        now = self.clock()
        with self._txn() as doc:
            g = self._gpu(doc, gpu_index)
            if g["mig_enabled"]:
                raise CountersUnavailableError(
                    f"GPU {gpu_index} of {self.node} is in MIG mode: NVML gives no per-process "
                    f"utilisation there (NOT_SUPPORTED); read per-instance activity (DCGM) instead",
                    reason="nvml-mig")
            procs = g.get("processes", {}).get(g["uuid"], {})
            out = []
            for owner, p in sorted(procs.items()):
                for tick in nvml_ticks(since_us / 1e6, now, p["since"]):
                    sm, mem = sm_sample(p["busy_pct"], self.noise, g["uuid"], owner, tick)
                    out.append(ProcessUtilization(g["uuid"], owner, int(tick * NVML_PERIOD_S * 1e6), sm, mem))
            return sorted(out, key=lambda u: (u.at_us, u.owner))

    def instance_activity(self, gpu_index: int) -> list[InstanceActivity]:
        """DCGM_FI_PROF_GR_ENGINE_ACTIVE of each MIG GPU instance over the last period."""
        now = self.clock()
        with self._txn() as doc:
            g = self._gpu(doc, gpu_index)
            self._require_mig(g, "read per-instance activity")
            tick = int(now // DCGM_PERIOD_S)
            out = []
            for inst in sorted(g["instances"], key=lambda i: i["gi_id"]):
                procs = g.get("processes", {}).get(inst["uuid"], {})
                busy = sum(p["busy_pct"] * activity_factor(
                    self.noise, inst["uuid"], owner, tick * DCGM_PERIOD_S)
                    for owner, p in procs.items()) / 100.0
                value = gr_sample(busy, self.noise, inst["uuid"], tick)
                out.append(InstanceActivity(inst["uuid"], inst["gi_id"], int(tick * DCGM_PERIOD_S * 1e6), value))
            return out
