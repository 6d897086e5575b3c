"""How the node agent materialises a job's isolation: a whole GPU, a MIG slice or an MPS share.

Which profile and which share are decided by :mod:`slurm_plugin.agent.isolation`; the MIG
instances themselves by :class:`slurm_plugin.agent.mig_manager.MigManager`. What comes out
is the job's :class:`~slurm_plugin.agent.state.Assignment`, with the environment its steps get.
"""
from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable
from pathlib import Path

from mig.errors import MigError
from slurm_plugin.agent import isolation as iso
from slurm_plugin.agent.mig_manager import MigManager
from slurm_plugin.agent.mps_daemons import MpsDaemons, MpsLimits
from slurm_plugin.agent.paths import AgentError, AgentPaths
from slurm_plugin.agent.state import Assignment

log = logging.getLogger(__name__)


class Isolator:
    """Makes a job's isolation on the GPU Slurm gave it (``mode``: packed jobs on MIG or MPS)."""

    def __init__(self, paths: AgentPaths, backend, mig: MigManager, *, mode: str,
                 shares_per_gpu: int | None, sim_dir: Path | None, clock: Callable[[], float],
                 mps_control: str | list[str] | None = None):
        self.paths = paths
        self.node = paths.node
        self.backend = backend
        self.mig = mig
        self.mode = mode
        self.shares_per_gpu = shares_per_gpu
        self.sim_dir = sim_dir
        self.clock = clock
        self.mps_daemons = MpsDaemons(paths.mps, mps_control)

    def make(self, job_id: int, uid: int | None, grant: iso.StepGrant) -> Assignment:
        """A new assignment for the job's first step on this node, its isolation made."""
        now = self.clock()
        token = secrets.token_hex(16)
        if not grant.gpu_indexes:
            return Assignment(job_id, self.node, -1, "none", "none", uid=uid, token=token,
                              created_at=now, started_at=now)
        gpu = grant.gpu_indexes[0]
        if len(grant.gpu_indexes) > 1 and grant.packed:
            log.warning("job %d has shards on GPUs %s; isolating it on GPU %d", job_id, grant.gpu_indexes, gpu)
        base = dict(job_id=job_id, node=self.node, gpu_index=gpu, shards=grant.shards, uid=uid,
                    token=token, created_at=now, started_at=now)
        if not grant.packed:
            return self._whole(Assignment(kind="whole", isolation="whole", **base))
        if self.mode == "mps":
            return self._mps(Assignment(kind="mps", isolation="mps", **base))
        return self._mig(Assignment(kind="mig", isolation="mig", **base))

    def base_env(self, a: Assignment) -> dict[str, str]:
        """What every step of the job gets besides its isolation's own variables."""
        env = {
            "GPUPACK_NODE": self.node,
            "GPUPACK_GPU_INDEX": str(a.gpu_index),
            "GPUPACK_ISOLATION": a.isolation,
            "GPUPACK_AGENT_SOCKET": str(self.paths.socket),
            "GPUPACK_REPORT_TOKEN": a.token,
        }
        if a.device_uuid:
            env["GPUPACK_SIM_DEVICE"] = a.device_uuid
        if self.sim_dir is not None:
            env["GPUPACK_SIM_DIR"] = str(self.sim_dir)
        if a.mem_limit_bytes:
            env["GPUPACK_MEM_LIMIT_BYTES"] = str(a.mem_limit_bytes)
        return env

    def _gpu(self, gpu_index: int):
        gpus = {g.index: g for g in self.backend.list_gpus()}
        g = gpus.get(gpu_index)
        if g is None:
            raise AgentError(f"Slurm gave GPU {gpu_index}, but {self.node} has GPUs {sorted(gpus)}")
        return g

    def _whole(self, a: Assignment) -> Assignment:
        """A whole GPU: nothing to change; on a MIG-mode GPU the job gets the full-size instance."""
        g = self._gpu(a.gpu_index)
        if not g.mig_enabled:
            a.device_uuid = g.uuid
            return a
        full = iso.full_gpu_profile(self.backend.catalog(a.gpu_index))
        self.mig.destroy_idle(a.gpu_index)  # slices a layout prepared: the whole GPU is this job's
        try:
            inst = self.backend.create_instance(a.gpu_index, full.name, 0, owner=a.owner)
        except MigError as exc:
            a.notes.append(f"whole GPU is in MIG mode and partly used: {exc}")
            log.warning("job %d: whole GPU %d is in MIG mode and partly used (%s); the job may "
                        "share it with packed jobs", a.job_id, a.gpu_index, exc)
            return a
        a.profile, a.start, a.gi_id, a.device_uuid = inst.profile, inst.start, inst.gi_id, inst.uuid
        a.created_instance = True
        return a

    def _mig(self, a: Assignment) -> Assignment:
        inst = self.mig.slice_for(a)
        a.profile, a.start, a.gi_id, a.device_uuid = inst.profile, inst.start, inst.gi_id, inst.uuid
        a.created_instance = True
        a.isolation = f"mig:{inst.profile}@{inst.start}"
        a.env = {"CUDA_VISIBLE_DEVICES": inst.uuid}
        return a

    # -- MPS ------------------------------------------------------------------------------------
    def _mps(self, a: Assignment) -> Assignment:
        g = self._gpu(a.gpu_index)
        other = next((b for b in self.mig.assignments() if b.kind == "mps" and b.gpu_index == a.gpu_index
                      and b.job_id != a.job_id and b.uid != a.uid), None)
        if other is not None:  # one MPS server per GPU serves one user at a time
            raise AgentError(f"GPU {a.gpu_index} serves MPS clients of uid {other.uid} (job {other.job_id}); "
                             f"MPS servers are per user, so uid {a.uid}'s packed job cannot share it now")
        if g.mig_enabled:  # MPS shares a whole GPU: MIG must be off (as a MIG slice turns it on)
            self.mig.leave_mig_mode(a.gpu_index)
        shares = iso.ladder_shares(self.backend.catalog(a.gpu_index), self.shares_per_gpu)
        pct = self.planned_pct(a.gpu_index, a.job_id) or iso.mps_percentage(a.shards, shares)
        a.mem_limit_bytes = iso.mps_memory_limit_bytes(a.shards, shares, g.memory_mib)
        a.isolation = f"mps:{pct}"
        a.device_uuid = g.uuid
        a.env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(pct)}
        daemon = self.mps_daemons.ensure(mps_key(a), g.uuid, self._daemon_limits(a.gpu_index, a))
        pipe, logs = daemon.pipe, daemon.logs
        a.env = {
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(pct),
            "CUDA_MPS_PIPE_DIRECTORY": str(pipe),
            "CUDA_MPS_LOG_DIRECTORY": str(logs),
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={a.mem_limit_bytes // (1024 * 1024)}M",
        }
        return a

    def _mps_jobs(self, gpu_index: int, extra: Assignment | None = None) -> list[Assignment]:
        jobs = {b.job_id: b for b in self.mig.assignments() if b.kind == "mps" and b.gpu_index == gpu_index}
        if extra is not None:
            jobs[extra.job_id] = extra
        return list(jobs.values())

    def _daemon_limits(self, gpu_index: int, extra: Assignment | None = None) -> MpsLimits:
        shares = [(int(b.env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100")), b.mem_limit_bytes or 0)
                  for b in self._mps_jobs(gpu_index, extra)]
        return MpsLimits(*iso.mps_daemon_limits(shares))

    def mps_released(self, a: Assignment) -> None:
        """An MPS job ended: the daemon of its GPU stops with the GPU's last MPS job, else its
        limits follow the jobs that are left."""
        if a.kind != "mps":
            return
        left = [b for b in self._mps_jobs(a.gpu_index) if b.job_id != a.job_id]
        try:
            if left:
                self.mps_daemons.ensure(mps_key(a), left[0].device_uuid or "", self._daemon_limits(a.gpu_index))
            else:
                self.mps_daemons.stop(mps_key(a))
        except AgentError as exc:
            log.error("job %d ended; its GPU's MPS daemon: %s", a.job_id, exc)

    def watch_mps(self) -> list[str]:
        """Every MPS job's daemon running with its limits (started again when it died, also
        after an agent restart); a daemon no job needs any more is stopped."""
        done = []
        wanted: dict[str, Assignment] = {}
        for b in self.mig.assignments():
            if b.kind == "mps" and b.device_uuid:
                wanted.setdefault(mps_key(b), b)
        for key, b in wanted.items():
            if key not in self.mps_daemons.daemons:
                try:
                    self.mps_daemons.ensure(key, b.device_uuid, self._daemon_limits(b.gpu_index))
                except AgentError as exc:
                    done.append(f"MPS daemon {key}: {exc}")
        done += self.mps_daemons.watch()
        for key in self.mps_daemons.running_keys():
            if key not in wanted:
                self.mps_daemons.stop(key)
                done.append(f"MPS daemon {key} stopped: no MPS job uses it")
        return done

    def planned_pct(self, gpu_index: int, job_id: int) -> int | None:
        """The helper's MPS percentage for this job, from the GPU's measured utilisations
        (sent over the link, kept at `agent/<node>/mps-plan.json`); None when it has none."""
        try:
            doc = json.loads(self.paths.mps_plan.read_text())
            pct = doc.get("plan", {}).get(str(gpu_index), {}).get(str(job_id))
        except (OSError, ValueError, AttributeError):
            return None
        if isinstance(pct, int) and not isinstance(pct, bool) and 1 <= pct <= 100:
            return pct
        return None

    def apply_mps_plan(self, a: Assignment) -> None:
        """A later step of an MPS job starts with the share the helper measured for it."""
        pct = self.planned_pct(a.gpu_index, a.job_id)
        if pct is None or a.env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == str(pct):
            return
        log.info("job %d: MPS share %s%% -> %d%% (measured utilisation plan)", a.job_id,
                 a.env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), pct)
        a.env = {**a.env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(pct), "GPUPACK_ISOLATION": f"mps:{pct}"}
        a.isolation = f"mps:{pct}"
        self.mps_daemons.ensure(mps_key(a), a.device_uuid or "", self._daemon_limits(a.gpu_index, a))


def mps_key(a: Assignment) -> str:
    """The MPS daemon an MPS job's clients use: its GPU's."""
    return f"gpu{a.gpu_index}"
