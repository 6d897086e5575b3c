"""The simulated GPU's ``libnvidia-ml``: the fake NVML library backed by the simulated
GPU's shared, file-backed state, for the node agent's NVML backend to run on unchanged.

:class:`SimulatedNvml` is :class:`~.library.FakeNvml` (the same C prototypes, checks and
refusals) whose model is the node's state document of :mod:`gpus.sim.store`
(``DIR/<node>.json``, under its ``flock``) instead of memory:

- every call reads the document first; a call that changes the GPU (MIG mode, GPU and
  compute instances) writes it back before the lock is released, so the agent, the
  simulated workloads and ``gpupack simgpu`` all see one GPU;
- processes are the simulated workloads (``gpupack simgpu run``), which register under
  their own pid (:meth:`gpus.sim.counters.SimCounters.start_process`, memory through
  :meth:`gpus.sim.memory.SimMemory.alloc_memory`); only live pids are listed, as the driver
  frees a dead process's memory; a process registered as an MPS client (``mps``) is
  listed by the MPS call only;
- per-process utilisation samples are the simulated GPU's counters
  (:func:`gpus.sim.counters.sm_sample`), on a whole GPU only (NOT_SUPPORTED in MIG mode).

:func:`install` makes the real ``pynvml`` use it: the node agent does so for
``--nvml-library simulated:DIR`` and is otherwise the agent of a real node.
"""
from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence

from gpus.sim.caps import device_minor
from gpus.sim.counters import NVML_PERIOD_S, nvml_ticks, sm_sample
from gpus.sim.store import SimGpuStore

from .library import FakeNvml
from .model import FakeComputeInstance, FakeGpu, FakeGpuInstance, FakeProcess
from .nvml_h import CI_PROFILE_SLICES, COMPUTE_MODE_NAMES, COMPUTEMODE_DEFAULT, MIG_DISABLE, MIG_ENABLE

log = logging.getLogger(__name__)

# the C functions that change the GPU: the document is written back after them
CHANGING = frozenset({
    "nvmlDeviceSetMigMode", "nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlGpuInstanceDestroy",
    "nvmlGpuInstanceCreateComputeInstance", "nvmlComputeInstanceDestroy", "nvmlDeviceSetComputeMode",
})
_MODE_CODES = {name: code for code, name in COMPUTE_MODE_NAMES.items()}
_FULL_CI = {slices: index for index, slices in CI_PROFILE_SLICES.items()}


def pid_alive(pid: int, proc: str = "/proc") -> bool:
    return os.path.exists(f"{proc}/{pid}")


class SimulatedNvml(FakeNvml):
    """The fake NVML over one node's simulated GPUs in ``state_dir`` (created with ``gpus``
    catalogue models when the node has none yet)."""

    def __init__(self, state_dir: str | os.PathLike, node: str, gpus: Sequence[str] | None = None,
                 mig_enabled: bool = True, clock: Callable[[], float] = time.time,
                 alive: Callable[[int], bool] = pid_alive):
        self.store = SimGpuStore(Path(state_dir), node, gpus=gpus, mig_enabled=mig_enabled)
        doc = self.store.snapshot()
        rows = sorted(doc["gpus"], key=lambda g: g["index"])
        super().__init__([g["model"] for g in rows], privileged=os.geteuid() == 0)
        for gpu, g in zip(self.gpus, rows):
            gpu.uuid, gpu.minor = g["uuid"], device_minor(g)
        self.clock = clock
        self.alive = alive
        self._activity: dict[tuple[str, int], dict] = {}

    def __repr__(self) -> str:
        return f"<simulated libnvidia-ml.so.1 of {self.store.node} at {self.store.state_path}>"

    # -- every call: the model is the shared document ---------------------------------------
    @contextmanager
    def _backing(self, name: str) -> Iterator[None]:
        write = name in CHANGING
        with self.store.document(write=write) as doc:
            rows = sorted(doc["gpus"], key=lambda g: g["index"])
            self._activity = {}
            for gpu, g in zip(self.gpus, rows):
                self._load(gpu, g)
            yield
            if write:
                for gpu, g in zip(self.gpus, rows):
                    self._save(gpu, g)

    def _load(self, gpu: FakeGpu, g: dict) -> None:
        gpu.mig_current = MIG_ENABLE if g["mig_enabled"] else MIG_DISABLE
        gpu.mig_pending = MIG_ENABLE if g.get("mig_pending", g["mig_enabled"]) else MIG_DISABLE
        gpu.generation = g["generation"]
        wanted = {rec["gi_id"]: rec for rec in g["instances"]}
        for gi_id, gi in list(gpu.gis.items()):  # objects stay while their instance does (handles)
            rec = wanted.get(gi_id)
            if rec is None or rec["profile"] != gi.profile.name or rec["start"] != gi.start:
                for ci in gi.cis.values():
                    gpu.mig_slots.pop(ci.slot, None)
                del gpu.gis[gi_id]
        for gi_id, rec in sorted(wanted.items()):
            gi = gpu.gis.get(gi_id)
            if gi is None:
                gi = gpu.gis[gi_id] = FakeGpuInstance(gpu, gi_id, gpu.catalog.profile(rec["profile"]),
                                                      rec["start"])
            self._load_cis(gpu, gi, rec)
        modes = g.get("compute_modes", {})
        gpu.processes = self._processes(g, gpu.uuid)
        gpu.compute_mode = _MODE_CODES.get(modes.get(gpu.uuid, ""), COMPUTEMODE_DEFAULT)
        for gi in gpu.gis.values():
            for ci in gi.cis.values():
                ci.processes = self._processes(g, ci.uuid)
                ci.compute_mode = _MODE_CODES.get(modes.get(ci.uuid, ""), COMPUTEMODE_DEFAULT)

    @staticmethod
    def _cis_of(gi: FakeGpuInstance, rec: dict) -> list[dict]:
        if "cis" in rec:
            return rec["cis"]
        if not rec.get("uuid"):
            return []
        # an instance the simulated-GPU backend made: one full-size compute instance
        slices = gi.profile.compute_slices
        return [{"ci_id": rec.get("ci_id") or 0, "profile_index": _FULL_CI.get(slices, 0),
                 "slices": slices, "start": 0, "slot": None, "uuid": rec["uuid"]}]

    def _load_cis(self, gpu: FakeGpu, gi: FakeGpuInstance, rec: dict) -> None:
        wanted = {c["ci_id"]: c for c in self._cis_of(gi, rec)}
        for ci_id, ci in list(gi.cis.items()):
            c = wanted.get(ci_id)
            if c is None or c["uuid"] != ci.uuid:
                gpu.mig_slots.pop(ci.slot, None)
                del gi.cis[ci_id]
        for ci_id, c in sorted(wanted.items()):
            if ci_id in gi.cis:
                continue
            slot = c.get("slot")
            if slot is None or slot in gpu.mig_slots:
                slot = next(i for i in range(gpu.catalog.compute_slices + 1) if i not in gpu.mig_slots)
            ci = FakeComputeInstance(gi, ci_id, c["profile_index"], c["slices"], c["start"], slot, c["uuid"])
            gi.cis[ci_id] = ci
            gpu.mig_slots[slot] = ci

    def _processes(self, g: dict, device_uuid: str) -> list[FakeProcess]:
        """The live processes registered on one device, with the memory they hold."""
        memory = g.get("memory", {}).get(device_uuid, {})
        running = g.get("processes", {}).get(device_uuid, {})
        out = []
        for owner in sorted(set(memory) | set(running)):
            if not owner.isdigit() or not self.alive(int(owner)):
                continue  # not a process (an owner the simulated-GPU backend named), or gone
            used = int(memory.get(owner, {}).get("current", 0))
            rec = running.get(owner)
            if rec is None and used == 0:
                continue
            if rec is not None:
                self._activity[(device_uuid, int(owner))] = rec
            out.append(FakeProcess(int(owner), used, mps=bool(rec and rec.get("mps"))))
        return out

    def _save(self, gpu: FakeGpu, g: dict) -> None:
        g["mig_enabled"] = gpu.mig_on
        g["mig_pending"] = gpu.mig_pending == MIG_ENABLE
        g["generation"] = gpu.generation
        old = {rec["gi_id"]: rec for rec in g["instances"]}
        g["instances"] = [self._record(gi, old.get(gi.id)) for gi in sorted(gpu.gis.values(), key=lambda x: x.id)]
        cis = [ci for gi in gpu.gis.values() for ci in gi.cis.values()]
        g["compute_modes"] = {d.uuid: COMPUTE_MODE_NAMES[d.compute_mode] for d in [gpu, *cis]
                              if d.compute_mode != COMPUTEMODE_DEFAULT}
        live = {gpu.uuid} | {ci.uuid for ci in cis}
        for key in ("memory", "processes", "mps_servers"):
            for dev in [d for d in g.get(key, {}) if d not in live]:
                del g[key][dev]

    @staticmethod
    def _record(gi: FakeGpuInstance, old: dict | None) -> dict:
        cis = sorted(gi.cis.values(), key=lambda c: c.id)
        first = cis[0] if cis else None
        same = old is not None and old["profile"] == gi.profile.name and old["start"] == gi.start
        return {
            "gi_id": gi.id, "profile": gi.profile.name, "start": gi.start, "size": gi.size,
            "ci_id": first.id if first else None, "uuid": first.uuid if first else None,
            "memory_mib": gi.profile.memory_mib, "owner": old.get("owner") if same else None,
            "cis": [{"ci_id": c.id, "profile_index": c.profile_index, "slices": c.slices,
                     "start": c.start, "slot": c.slot, "uuid": c.uuid} for c in cis],
        }

    # -- utilisation: the simulated GPU's counters -------------------------------------------
    def _samples_of(self, gpu: FakeGpu, proc: FakeProcess) -> list[tuple[int, int, int]]:
        rec = self._activity.get((gpu.uuid, proc.pid))
        if rec is None:
            return []
        out = []
        for tick in nvml_ticks(0.0, self.clock(), rec["since"]):  # the driver's buffer
            sm, mem = sm_sample(rec["busy_pct"], self.store.noise, gpu.uuid, str(proc.pid), tick)
            out.append((int(tick * NVML_PERIOD_S * 1e6), sm, mem))
        return out


def install(fake: FakeNvml) -> None:
    """Make the real ``pynvml`` call ``fake`` (before its first ``nvmlInit``): pynvml loads
    ``libnvidia-ml.so.1`` only while its ``nvmlLib`` is unset."""
    import pynvml  # noqa: PLC0415 - only the NVML backend needs it

    if pynvml.nvmlLib is not None and pynvml.nvmlLib is not fake.lib:
        raise RuntimeError(f"pynvml has already loaded {pynvml.nvmlLib!r}; install the simulated "
                           f"library before NVML is initialised")
    pynvml.nvmlLib = fake.lib
    log.info("NVML is %r", fake)
