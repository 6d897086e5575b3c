"""How the node agent materialises a job's isolation: a whole GPU, a MIG slice or an MPS share.

Which profile and which share are decided by :mod:`slurm_plugin.agent.isolation`; the MIG
instances themselves by :class:`slurm_plugin.agent.mig_manager.MigManager`. What comes out
is the job's :class:`~slurm_plugin.agent.state.Assignment`, with the environment its steps get.
"""
from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from pathlib import Path

from mig.errors import MigError
from slurm_plugin.agent import isolation as iso
from slurm_plugin.agent.framework_env import framework_env
from slurm_plugin.agent.mig_manager import MigManager
from slurm_plugin.agent.mps_shares import MpsShares
from slurm_plugin.agent.paths import AgentError, AgentPaths
from slurm_plugin.agent.state import Assignment

log = logging.getLogger(__name__)


class Isolator:
    """Makes a job's isolation on the GPU Slurm gave it (``mode``: packed jobs on MIG or MPS)."""

    def __init__(self, paths: AgentPaths, backend, mig: MigManager, *, mode: str,
                 shares_per_gpu: int | None, sim_dir: Path | None, clock: Callable[[], float],
                 mps_control: str | list[str] | None = None, mps_in_mig_shares: int = 0):
        self.paths = paths
        self.node = paths.node
        self.backend = backend
        self.mig = mig
        self.mode = mode
        self.shares_per_gpu = shares_per_gpu
        self.sim_dir = sim_dir
        self.clock = clock
        self.mps = MpsShares(paths, backend, mig, shares_per_gpu=shares_per_gpu, mps_control=mps_control,
                             mps_in_mig_shares=mps_in_mig_shares, daemon_env=self._sim_env())

    def _sim_env(self) -> dict[str, str]:
        """The simulated GPU's place, for the stand-in MPS daemons (nothing on real GPUs)."""
        return {} if self.sim_dir is None else {"GPUPACK_SIM_DIR": str(self.sim_dir), "GPUPACK_NODE": self.node}

    def make(self, job_id: int, uid: int | None, grant: iso.StepGrant) -> Assignment:
        """A new assignment for the job's first step on this node, its isolation made."""
        now = self.clock()
        token = secrets.token_hex(16)
        if not grant.gpu_indexes:
            if grant.packed:  # shards on no GPU Slurm named: nothing to isolate it on, never "OK none"
                raise AgentError(f"job {job_id} holds {grant.shards} shards on {self.node} but Slurm named "
                                 f"no GPU for its step (SLURM_JOB_GPUS for a batch step, SLURM_STEP_GPUS "
                                 f"for an srun step); a packed step is not started unisolated")
            return Assignment(job_id, self.node, -1, "none", "none", uid=uid, token=token,
                              created_at=now, started_at=now)
        gpu = grant.gpu_indexes[0]
        if grant.packed:
            why = iso.gpu_conflict(self.mig.assignments(), job_id, uid, gpu, self.mode)
            if why is not None:
                raise AgentError(f"job {job_id}: {why}")
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
        """What every step of the job gets besides its isolation's own variables (with the
        framework settings that stop whole-GPU preallocation, `.framework_env`)."""
        env = {
            **framework_env(a.gpu_index),
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
        try:  # slices a layout prepared go: the whole GPU is this job's
            inst = self.mig.whole_slice(a, full.name)
        except MigError as exc:
            a.notes.append(f"whole GPU is in MIG mode and partly used: {exc}")
            log.warning("job %d: whole GPU %d is in MIG mode and partly used (%s); the job may "
                        "share it with packed jobs", a.job_id, a.gpu_index, exc)
            return a
        a.profile, a.start, a.gi_id, a.device_uuid = inst.profile, inst.start, inst.gi_id, inst.uuid
        a.created_instance = True
        return a

    def _mig(self, a: Assignment) -> Assignment:
        if self.mps.wants_mig_share(a):  # a small job: an MPS share of a MIG instance
            return self.mps.mig_share(a)
        inst = self.mig.slice_for(a)
        a.profile, a.start, a.gi_id, a.device_uuid = inst.profile, inst.start, inst.gi_id, inst.uuid
        a.created_instance = True
        a.isolation = f"mig:{inst.profile}@{inst.start}"
        a.env = {"CUDA_VISIBLE_DEVICES": inst.uuid}
        return a

    def _mps(self, a: Assignment) -> Assignment:
        return self.mps.share(a, self._gpu(a.gpu_index))
