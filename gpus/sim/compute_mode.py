"""The compute mode of the simulated GPUs, and what it allows of CUDA contexts.

Kept in the state document as ``g["compute_modes"][device_uuid]`` (absent: DEFAULT), where
the simulated libnvidia-ml (:mod:`gpus.sim.nvml.shared`) reads and sets it too. As on
hardware, a MIG-enabled GPU has no compute mode of its own: each MIG device has one.

When a process makes its CUDA context (:meth:`gpus.sim.counters.SimCounters.start_process`):
DEFAULT allows any number; PROHIBITED none; EXCLUSIVE_PROCESS one, where every MPS client
of the device shares the MPS server's one context. So on an exclusive-process device that
MPS clients use, a process that does not go through MPS is refused, and while a plain
process holds the device, MPS clients are refused: CUDA's "all CUDA-capable devices are
busy or unavailable" (:class:`mig.errors.DevicesUnavailableError`).

An MPS server holds that one context from its start (the stand-in control daemon opens it:
:meth:`SimComputeMode.open_mps_server`), before any client, as the real server does: so a
server started up front (``start_server -uid``) refuses a later plain process, and a plain
process that got there first refuses the server (and so every MPS client). A server counts
while its daemon runs (``g["mps_servers"][device_uuid][server id]`` = the daemon's pid).

A part of :class:`gpus.sim.backend.SimGpuBackend`, which gives ``_txn``, ``_gpu``,
``_instance`` and ``node``.
"""
from __future__ import annotations

import os

from mig.backend import COMPUTE_DEFAULT, COMPUTE_EXCLUSIVE_PROCESS, COMPUTE_MODES, COMPUTE_PROHIBITED
from mig.errors import DevicesUnavailableError, MigEnabledError

SERVERS = "mps_servers"
BUSY = "CUDA error: all CUDA-capable devices are busy or unavailable"


def _pid_alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _alive(owner: str) -> bool:
    """A process owner that is a pid counts while it runs (the driver drops a dead
    process's context); another owner (a job's name, in unit tests) while registered."""
    return not owner.isdigit() or os.path.exists(f"/proc/{owner}")


class SimComputeMode:
    """Compute modes per device, and the check every new CUDA context passes."""

    def _device_uuid(self, g: dict, gi_id: int | None) -> str:
        if gi_id is not None:
            return self._instance(g, gi_id)["uuid"]
        if g["mig_enabled"]:
            raise MigEnabledError(f"GPU {g['index']} of {self.node} is in MIG mode: its compute modes "
                                  f"are its MIG devices' (name a GPU instance)")
        return g["uuid"]

    def compute_mode(self, gpu_index: int, gi_id: int | None = None) -> str:
        with self._txn() as doc:
            g = self._gpu(doc, gpu_index)
            return g.get("compute_modes", {}).get(self._device_uuid(g, gi_id), COMPUTE_DEFAULT)

    def set_compute_mode(self, gpu_index: int, gi_id: int | None, mode: str) -> None:
        if mode not in COMPUTE_MODES:
            raise ValueError(f"compute mode {mode!r} is not one of {', '.join(COMPUTE_MODES)}")
        with self._txn(write=True) as doc:
            g = self._gpu(doc, gpu_index)
            modes = g.setdefault("compute_modes", {})
            modes[self._device_uuid(g, gi_id)] = mode
            if mode == COMPUTE_DEFAULT:
                del modes[self._device_uuid(g, gi_id)]

    def open_mps_server(self, device_uuid: str, server: int, daemon_pid: int) -> None:
        """An MPS server makes its (the device's one) context; DevicesUnavailableError when a
        process outside MPS holds an EXCLUSIVE_PROCESS device."""
        with self._txn(write=True) as doc:
            _, _, g, _ = self._locate(doc, device_uuid)
            self._check_context(g, device_uuid, f"mps-server-{server}", mps=True)
            g.setdefault(SERVERS, {}).setdefault(device_uuid, {})[str(server)] = int(daemon_pid)

    def close_mps_server(self, device_uuid: str, server: int) -> None:
        with self._txn(write=True) as doc:
            _, _, g, _ = self._locate(doc, device_uuid)
            servers = g.get(SERVERS, {}).get(device_uuid, {})
            servers.pop(str(server), None)
            if not servers:
                g.get(SERVERS, {}).pop(device_uuid, None)

    def _check_context(self, g: dict, device_uuid: str, owner: str, mps: bool) -> None:
        """Raise DevicesUnavailableError when the device's compute mode refuses a new context
        of ``owner`` (an MPS client when ``mps``)."""
        mode = g.get("compute_modes", {}).get(device_uuid, COMPUTE_DEFAULT)
        if mode == COMPUTE_PROHIBITED:
            raise DevicesUnavailableError(f"{BUSY} ({device_uuid} of {self.node} is in PROHIBITED compute mode)")
        if mode != COMPUTE_EXCLUSIVE_PROCESS:
            return
        others = {o: p for o, p in g.get("processes", {}).get(device_uuid, {}).items() if o != owner and _alive(o)}
        holders = sorted(o for o, p in others.items() if not (mps and p.get("mps")))
        servers = [f"MPS server {s}" for s, pid in sorted(g.get(SERVERS, {}).get(device_uuid, {}).items())
                   if _pid_alive(pid)]
        if servers and not mps:
            raise DevicesUnavailableError(
                f"{BUSY} ({device_uuid} of {self.node} is in EXCLUSIVE_PROCESS compute mode and its one "
                f"context is held by {', '.join(servers)}; on this device CUDA runs only through its MPS "
                f"server (CUDA_MPS_PIPE_DIRECTORY))")
        if holders:
            raise DevicesUnavailableError(
                f"{BUSY} ({device_uuid} of {self.node} is in EXCLUSIVE_PROCESS compute mode and its one "
                f"context is held by {', '.join(f'{o} (MPS client)' if others[o].get('mps') else o for o in holders)}"
                f"{'; on this device CUDA runs only through its MPS server (CUDA_MPS_PIPE_DIRECTORY)' if not mps else ''})")
