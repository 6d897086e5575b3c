"""A packed job's MPS share: on a whole GPU (a node in MPS mode), or inside a MIG instance that
small jobs of one user share through MPS beside other instances of the GPU (a MIG node with
``mps_in_mig_shares``: the hierarchy of MIG + MPS). Each share's device has its MPS control
daemon (:class:`.mps_daemons.MpsDaemons`), whose limits follow the jobs on it, and is in
exclusive-process compute mode while it has shares (:class:`.exclusive_mode.ExclusiveMode`;
docs/mps.md).
"""
from __future__ import annotations

import dataclasses
import json
import logging
from collections import defaultdict
from collections.abc import Iterable

from packer.mps import device_key
from slurm_plugin.agent import isolation as iso
from slurm_plugin.agent.mig_manager import MigManager
from slurm_plugin.agent.exclusive_mode import ExclusiveMode
from slurm_plugin.agent.mps_daemons import MpsDaemons, MpsLimits
from slurm_plugin.agent.paths import AgentError, AgentPaths
from slurm_plugin.agent.state import Assignment

log = logging.getLogger(__name__)


def mps_key(a: Assignment) -> str:
    """The MPS daemon an MPS job's clients use: its GPU's, or its MIG instance's."""
    return f"gpu{a.gpu_index}" if a.gi_id is None else f"gpu{a.gpu_index}-gi{a.gi_id}"


def _on_device(a: Assignment) -> bool:
    """An MPS job whose device is there (not one whose MIG instance a driver reload took)."""
    return a.kind == "mps" and bool(a.device_uuid)


def plan_key(a: Assignment) -> str:
    """The device an MPS job's planned percentage is counted on: its GPU, or its MIG instance."""
    return device_key(a.gpu_index, None if a.gi_id is None else f"{a.profile}@{a.start}")


def pool_for(jobs: Iterable[Assignment], a: Assignment, capacity: int) -> Assignment | None:
    """A job whose MPS-shared MIG instance (on ``a``'s GPU, of ``a``'s user) has room for
    ``a``'s shares within ``capacity`` shares; None when there is none (pure)."""
    used: dict[str, int] = defaultdict(int)
    first: dict[str, Assignment] = {}
    for b in jobs:
        if b.kind == "mps" and b.gi_id is not None and b.gpu_index == a.gpu_index and b.job_id != a.job_id:
            used[b.device_uuid or ""] += b.shards
            first.setdefault(b.device_uuid or "", b)
    return next((b for uuid, b in first.items() if b.uid == a.uid and used[uuid] + a.shards <= capacity), None)


class MpsShares:
    """MPS shares and their daemons, on the GPUs and MIG instances of one node."""

    def __init__(self, paths: AgentPaths, backend, mig: MigManager, *, shares_per_gpu: int | None,
                 mps_control: str | list[str] | None = None, mps_in_mig_shares: int = 0,
                 daemon_env: dict[str, str] | None = None):
        self.paths = paths
        self.backend = backend
        self.mig = mig
        self.shares_per_gpu = shares_per_gpu
        self.in_mig = mps_in_mig_shares
        self.daemons = MpsDaemons(paths.mps, mps_control, env=daemon_env)
        self.exclusive = ExclusiveMode(backend, paths.mps)

    def share(self, a: Assignment, gpu) -> Assignment:
        """An MPS share of a whole GPU (``gpu``, a GpuInfo): one user's jobs per GPU."""
        why = iso.gpu_conflict(self.mig.assignments(), a.job_id, a.uid, a.gpu_index, "mps")
        if why is not None:  # one MPS server per GPU serves one user at a time; a whole GPU is its job's
            raise AgentError(why)
        if gpu.mig_enabled:  # MPS shares a whole GPU: MIG must be off (as a MIG slice turns it on)
            self.mig.leave_mig_mode(a.gpu_index)
        shares = iso.ladder_shares(self.backend.catalog(a.gpu_index), self.shares_per_gpu)
        pct = self.planned_pct(plan_key(a), a.job_id) or iso.mps_percentage(a.shards, shares)
        a.mem_limit_bytes = iso.mps_memory_limit_bytes(a.shards, shares, gpu.memory_mib)
        a.isolation = f"mps:{pct}"
        a.device_uuid = gpu.uuid
        return self._with_daemon(a, pct, {})

    def wants_mig_share(self, a: Assignment) -> bool:
        """A small packed job on a MIG node that shares MIG instances through MPS."""
        return 0 < a.shards < self.in_mig

    def mig_share(self, a: Assignment) -> Assignment:
        """A share of a MIG instance sized for ``mps_in_mig_shares`` shares, through MPS: the
        instance of another job of the user with room, else a new one."""
        pool = pool_for(self.mig.assignments(), a, self.in_mig)
        if pool is not None:
            a.profile, a.start, a.gi_id, a.device_uuid = pool.profile, pool.start, pool.gi_id, pool.device_uuid
            a.notes.append(f"shares MIG instance {pool.profile}@{pool.start} with job {pool.job_id} through MPS")
        else:
            inst = self.mig.slice_for(dataclasses.replace(a, shards=self.in_mig))
            a.profile, a.start, a.gi_id, a.device_uuid = inst.profile, inst.start, inst.gi_id, inst.uuid
            a.created_instance = True
        mem_mib = next(i.memory_mib for i in self.backend.list_instances(a.gpu_index) if i.gi_id == a.gi_id)
        a.kind = "mps"
        pct = self.planned_pct(plan_key(a), a.job_id) or iso.mps_percentage(a.shards, self.in_mig)
        a.mem_limit_bytes = iso.mps_memory_limit_bytes(a.shards, self.in_mig, mem_mib)
        a.isolation = self._isolation(a, pct)
        return self._with_daemon(a, pct, {"CUDA_VISIBLE_DEVICES": a.device_uuid or ""})

    def _with_daemon(self, a: Assignment, pct: int, env: dict[str, str]) -> Assignment:
        a.env = {**env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(pct)}
        self.exclusive.hold(mps_key(a), a.gpu_index, a.gi_id)  # before the daemon, as NVIDIA's docs do
        daemon = self.daemons.ensure(mps_key(a), a.device_uuid or "", self._limits(mps_key(a), a), a.uid)
        a.env.update({
            "CUDA_MPS_PIPE_DIRECTORY": str(daemon.pipe),
            "CUDA_MPS_LOG_DIRECTORY": str(daemon.logs),
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={a.mem_limit_bytes // (1024 * 1024)}M",
        })
        return a

    # -- the daemons' limits, their ends ----------------------------------------------------
    def _jobs(self, key: str, extra: Assignment | None = None) -> list[Assignment]:
        jobs = {b.job_id: b for b in self.mig.assignments() if _on_device(b) and mps_key(b) == key}
        if extra is not None:
            jobs[extra.job_id] = extra
        return list(jobs.values())

    def _limits(self, key: str, extra: Assignment | None = None) -> MpsLimits:
        shares = [(int(b.env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100")), b.mem_limit_bytes or 0)
                  for b in self._jobs(key, extra)]
        return MpsLimits(*iso.mps_daemon_limits(shares))

    def holder_after(self, a: Assignment) -> Assignment | None:
        """Another job on ``a``'s MPS-shared MIG instance (which keeps it after ``a``)."""
        if a.kind != "mps" or a.gi_id is None:
            return None
        return next((b for b in self._jobs(mps_key(a)) if b.job_id != a.job_id), None)

    def released(self, a: Assignment) -> None:
        """An MPS job ended: its device's daemon stops with the device's last MPS job, else its
        limits follow the jobs that are left."""
        if not _on_device(a):
            return
        key = mps_key(a)
        left = [b for b in self._jobs(key) if b.job_id != a.job_id]
        try:
            if left:
                self.daemons.ensure(key, left[0].device_uuid or "", self._limits(key), left[0].uid)
            else:
                self.daemons.stop(key)
                self.exclusive.release(key)
        except AgentError as exc:
            log.error("job %d ended; the MPS daemon %s: %s", a.job_id, key, exc)

    def watch(self) -> list[str]:
        """Every MPS job's daemon running with its limits (started again when it died, also
        after an agent restart); a daemon no job needs any more is stopped."""
        done = []
        wanted: dict[str, Assignment] = {}
        for b in self.mig.assignments():
            if _on_device(b):
                wanted.setdefault(mps_key(b), b)
        for key, b in wanted.items():
            if key not in self.daemons.daemons:
                try:
                    self.exclusive.hold(key, b.gpu_index, b.gi_id)
                    self.daemons.ensure(key, b.device_uuid or "", self._limits(key), b.uid)
                except AgentError as exc:
                    done.append(f"MPS daemon {key}: {exc}")
        done += self.daemons.watch()
        for key in self.daemons.running_keys():
            if key not in wanted:
                self.daemons.stop(key)
                done.append(f"MPS daemon {key} stopped: no MPS job uses it")
        done += self.exclusive.sweep(wanted)
        return done

    # -- the helper's plan ------------------------------------------------------------------
    @staticmethod
    def _isolation(a: Assignment, pct: int) -> str:
        return f"mps:{pct}" if a.gi_id is None else f"mps:{pct}@{a.profile}@{a.start}"

    def planned_pct(self, device: str, job_id: int) -> int | None:
        """The helper's MPS percentage for this job, from the measured utilisations of the jobs
        on its device (``plan_key``: a GPU, or an MPS-shared MIG instance, whose threads the
        percentage counts), sent over the link, kept at `agent/<node>/mps-plan.json`; None when
        it has none."""
        try:
            doc = json.loads(self.paths.mps_plan.read_text())
            pct = doc.get("plan", {}).get(device, {}).get(str(job_id))
        except (OSError, ValueError, AttributeError):
            return None
        if isinstance(pct, int) and not isinstance(pct, bool) and 1 <= pct <= 100:
            return pct
        return None

    def apply_plan(self, a: Assignment) -> None:
        """A later step of an MPS job starts with the share the helper measured for it, on its
        GPU or within its MIG instance; the device's daemon follows (its largest share)."""
        pct = self.planned_pct(plan_key(a), a.job_id) if _on_device(a) else None
        if pct is None or a.env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == str(pct):
            return
        log.info("job %d: MPS share %s%% -> %d%% on %s (measured utilisation plan)", a.job_id,
                 a.env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), pct, mps_key(a))
        a.isolation = self._isolation(a, pct)
        a.env = {**a.env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(pct), "GPUPACK_ISOLATION": a.isolation}
        self.daemons.ensure(mps_key(a), a.device_uuid or "", self._limits(mps_key(a), a), a.uid)
