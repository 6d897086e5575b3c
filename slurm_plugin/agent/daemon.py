"""The node agent: materialises each job's isolation, samples jobs, reconciles after a restart.

It is an adapter: which profile and where it goes are decided by
:mod:`slurm_plugin.agent.isolation` and :mod:`mig.policies`; the GPU is reached only
through a :class:`mig.backend.GpuBackend` (the simulated GPU here, NVML on real GPUs), and
Slurm only through ``list_running_jobs`` (squeue, via the Slurm adapter).
"""
from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mig.errors import MigError
from mig.node_layout import LAYOUT_POLICIES, layout_step
from mig.planner import plan_merge_split
from mig.policies import choose
from packer.samples import JobSample
from slurm_plugin.agent import isolation as iso
from slurm_plugin.agent.counters import CounterReader, CounterReading
from slurm_plugin.agent.state import BATCH_STEP, EXTERN_STEP, Assignment, StateFile, write_json_atomic
from slurm_plugin.agent.trust import Peer, ReportGuard, ReportRejected, check_reporter

log = logging.getLogger(__name__)

SAMPLES_KEPT = 3600  # per job, in memory
RECONCILE_GRACE_S = 10.0  # a job isolated this recently is not freed because squeue lags
JobLister = Callable[[], "set[int] | None"]  # running job ids on this node; None = Slurm unreachable


class AgentError(RuntimeError):
    """An isolation request that cannot be met; the message goes to the SPANK plugin's log."""


@dataclass(frozen=True)
class AgentPaths:
    state_dir: Path
    node: str

    @property
    def socket(self) -> Path:
        return socket_path(self.state_dir, self.node)

    @property
    def home(self) -> Path:
        return self.state_dir / "agent" / self.node

    @property
    def finals(self) -> Path:
        return self.home / "final"

    @property
    def mps(self) -> Path:
        return self.state_dir / "mps" / self.node


def socket_path(state_dir: Path, node: str) -> Path:
    return Path(state_dir) / "run" / f"agent-{node}.sock"


def final_path(state_dir: Path, node: str, job_id: int) -> Path:
    return Path(state_dir) / "agent" / node / "final" / f"{int(job_id)}.json"


class NodeAgent:
    def __init__(self, node: str, state_dir: Path, backend, *, isolation_mode: str = "mig",
                 shares_per_gpu: int | None = None, policy: str = "fsm",
                 list_running_jobs: JobLister | None = None, sim_dir: Path | None = None,
                 clock: Callable[[], float] = time.time):
        if isolation_mode not in iso.ISOLATION_MODES:
            raise ValueError(f"isolation mode must be one of {iso.ISOLATION_MODES}, got {isolation_mode!r}")
        self.node = node
        self.paths = AgentPaths(Path(state_dir), node)
        self.backend = backend
        self.mode = isolation_mode
        self.shares_per_gpu = shares_per_gpu
        self.policy = policy
        self.list_running_jobs = list_running_jobs
        self.sim_dir = sim_dir
        self.clock = clock
        self.guard = ReportGuard()
        self.store = StateFile(self.paths.home)
        self.lock = threading.RLock()
        self.jobs: dict[int, Assignment] = self.store.load()
        self.recent: dict[int, deque[JobSample]] = {}
        self.counters = CounterReader(backend)
        self._dirty = False
        # the helper's layout policy, as last pushed ("off" until it says otherwise): with a
        # policy, a finished job's slice stays (idle) for the next job of that size
        self.layout_policy = "off"
        self.reconfigurations = 0

    # -- helpers --------------------------------------------------------------------------
    def _save(self) -> None:
        self.store.save(self.jobs)
        self._dirty = False

    def _shares(self, gpu_index: int) -> int:
        return self.shares_per_gpu or self.backend.catalog(gpu_index).memory_slices

    def _base_env(self, a: Assignment) -> dict[str, str]:
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

    # -- isolate ----------------------------------------------------------------------------
    def isolate(self, job_id: int, step_id: int, uid: int | None, env: dict[str, str]) -> Assignment:
        """The job's isolation for this step (made on its first step, reused by the others)."""
        grant = iso.grant_from_env(env)
        with self.lock:
            a = self.jobs.get(job_id)
            if a is not None and (not grant.gpu_indexes or a.gpu_index in grant.gpu_indexes):
                if a.kind == "mps":
                    self._apply_mps_plan(a)  # a later step starts with the measured share
                if step_id not in a.steps:
                    a.steps.append(step_id)
                    self._save()
                return a
            if a is not None:
                log.warning("job %d comes back on GPU %s (it had GPU %d): freeing the old isolation",
                            job_id, grant.gpu_indexes, a.gpu_index)
                self._finish(a, reason="moved")
            a = self._make(job_id, uid, grant)
            a.steps.append(step_id)
            a.env = {**a.env, **self._base_env(a)}
            self.jobs[job_id] = a
            self._save()
            log.info("job %d on GPU %d: %s (%s)", job_id, a.gpu_index, a.isolation, a.device_uuid or "-")
            return a

    def _make(self, job_id: int, uid: int | None, grant: iso.StepGrant) -> Assignment:
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

    def _whole(self, a: Assignment) -> Assignment:
        """A whole GPU: nothing to change; on a MIG-mode GPU the job gets the full-size instance."""
        gpus = {g.index: g for g in self.backend.list_gpus()}
        g = gpus.get(a.gpu_index)
        if g is None:
            raise AgentError(f"Slurm gave GPU {a.gpu_index}, but {self.node} has GPUs {sorted(gpus)}")
        if not g.mig_enabled:
            a.device_uuid = g.uuid
            return a
        cat = self.backend.catalog(a.gpu_index)
        full = iso.full_gpu_profile(cat)
        self._destroy_idle(a.gpu_index)  # slices a layout prepared: the whole GPU is this job's
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
        cat = self.backend.catalog(a.gpu_index)
        profile = iso.profile_for_shards(cat, a.shards)
        if profile is None:
            raise AgentError(f"no MIG profile of {cat.model} holds {a.shards} shares")
        if not self.backend.mig_mode(a.gpu_index):
            try:
                self.backend.set_mig_mode(a.gpu_index, True)
            except MigError as exc:
                raise AgentError(f"GPU {a.gpu_index} is not in MIG mode and cannot switch: {exc}") from exc
        inst = self._idle_instance(a.gpu_index, profile.name)
        if inst is not None:  # a slice the layout prepared for this size: no reconfiguration
            if hasattr(self.backend, "set_owner"):
                self.backend.set_owner(a.gpu_index, inst.gi_id, a.owner)
            a.notes.append(f"took the idle {inst.profile}@{inst.start} the layout had ready")
        else:
            start = self._place(a.gpu_index, profile.name)
            if start is None:
                start = self._merge_split(a.gpu_index, profile.name)
            if start is None:
                held = ", ".join(f"{i.profile}@{i.start}(job {i.owner})" for i in self.backend.list_instances(a.gpu_index))
                raise AgentError(f"no room for {profile.name} on GPU {a.gpu_index} (instances: {held or 'none'})")
            inst = self.backend.create_instance(a.gpu_index, profile.name, start, owner=a.owner)
            self.reconfigurations += 1
        a.profile, a.start, a.gi_id, a.device_uuid = inst.profile, inst.start, inst.gi_id, inst.uuid
        a.created_instance = True
        a.isolation = f"mig:{inst.profile}@{inst.start}"
        a.env = {"CUDA_VISIBLE_DEVICES": inst.uuid}
        return a

    def _place(self, gpu_index: int, profile: str) -> int | None:
        state = self.backend.partition_state(gpu_index)
        return choose(state, profile, self.policy).start

    def _held_gi_ids(self, gpu_index: int) -> set[int]:
        return {a.gi_id for a in self.jobs.values() if a.gpu_index == gpu_index and a.gi_id is not None}

    def _idle(self, gpu_index: int) -> list:
        """Instances no job holds: not owned, no memory in use, in no assignment of ours."""
        held = self._held_gi_ids(gpu_index)
        return [i for i in self.backend.list_instances(gpu_index)
                if not i.busy and not i.owner and i.gi_id not in held]

    def _idle_instance(self, gpu_index: int, profile: str):
        return next((i for i in self._idle(gpu_index) if i.profile == profile), None)

    def _destroy(self, gpu_index: int, inst, why: str) -> bool:
        try:
            self.backend.destroy_instance(gpu_index, inst.gi_id)
        except MigError as exc:
            log.warning("GPU %d: could not destroy idle %s@%s: %s", gpu_index, inst.profile, inst.start, exc)
            return False
        self.reconfigurations += 1
        log.info("GPU %d: destroyed idle %s@%s (%s)", gpu_index, inst.profile, inst.start, why)
        return True

    def _destroy_idle(self, gpu_index: int) -> None:
        """Remove every instance no job holds (left by a crash or a layout) to make room."""
        for inst in self._idle(gpu_index):
            self._destroy(gpu_index, inst, "to make room")

    def _merge_split(self, gpu_index: int, profile: str) -> int | None:
        """Destroy the fewest idle instances that let ``profile`` fit; its start, or None."""
        idle = {(i.profile, i.start): i for i in self._idle(gpu_index)}
        state = self.backend.partition_state(gpu_index)
        busy = [p for p in state.placements if (p.profile, p.start) not in idle]
        plan = plan_merge_split(state, profile, busy=busy)
        if not plan.feasible:
            return None
        for p in plan.destroy:
            if not self._destroy(gpu_index, idle[(p.profile, p.start)], f"merge/split for {profile}"):
                return None
        return plan.start

    # -- layouts that follow the queue ----------------------------------------------------
    def follow_queue(self, policy: str, pending_shards: list[int]) -> list[dict]:
        """Prepare idle MIG slices for the pending jobs (the helper's layout policy).

        Only idle instances are destroyed; returns the changes made, one dict each."""
        if policy not in LAYOUT_POLICIES:
            raise ValueError(f"unknown layout policy {policy!r}; choose one of {', '.join(LAYOUT_POLICIES)}")
        changes: list[dict] = []
        with self.lock:
            self.layout_policy = policy
            if policy == "off" or self.mode != "mig" or not pending_shards:
                return changes
            for g in self.backend.list_gpus():
                if g.mig_enabled:
                    changes += self._follow_on(g.index, policy, pending_shards)
        return changes

    def _follow_on(self, gpu_index: int, policy: str, pending_shards: list[int]) -> list[dict]:
        cat = self.backend.catalog(gpu_index)
        profiles = [p.name for p in (iso.profile_for_shards(cat, s) for s in pending_shards) if p is not None]
        idle = {(i.profile, i.start): i for i in self._idle(gpu_index)}
        state = self.backend.partition_state(gpu_index)
        busy = [p for p in state.placements if (p.profile, p.start) not in idle]
        step = layout_step(state, busy, profiles, policy)
        changes: list[dict] = []
        for p in step.destroy:
            inst = idle.get((p.profile, p.start))
            if inst is None or not self._destroy(gpu_index, inst, step.reason):
                return changes
            changes.append({"gpu": gpu_index, "op": "destroy", "profile": p.profile, "start": p.start})
        for p in step.create:
            try:
                self.backend.create_instance(gpu_index, p.profile, p.start, owner=None)
            except MigError as exc:
                log.warning("GPU %d: could not create %s@%s for the queue: %s", gpu_index, p.profile, p.start, exc)
                break
            self.reconfigurations += 1
            changes.append({"gpu": gpu_index, "op": "create", "profile": p.profile, "start": p.start})
        if changes:
            log.info("GPU %d layout (%s): %s", gpu_index, step.reason,
                     ", ".join(f"{c['op']} {c['profile']}@{c['start']}" for c in changes))
        return changes

    def _mps(self, a: Assignment) -> Assignment:
        gpus = {g.index: g for g in self.backend.list_gpus()}
        g = gpus.get(a.gpu_index)
        if g is None:
            raise AgentError(f"Slurm gave GPU {a.gpu_index}, but {self.node} has GPUs {sorted(gpus)}")
        if g.mig_enabled:  # MPS shares a whole GPU: MIG must be off (as _mig turns it on)
            self._destroy_idle(a.gpu_index)  # slices a layout had prepared
            if self.backend.list_instances(a.gpu_index):
                raise AgentError(f"GPU {a.gpu_index} is in MIG mode with instances; an MPS share needs MIG off")
            try:
                self.backend.set_mig_mode(a.gpu_index, False)
            except MigError as exc:
                raise AgentError(f"GPU {a.gpu_index} is in MIG mode and cannot leave it: {exc}") from exc
        shares = self._shares(a.gpu_index)
        pct = self._planned_pct(a.gpu_index, a.job_id) or iso.mps_percentage(a.shards, shares)
        a.mem_limit_bytes = iso.mps_memory_limit_bytes(a.shards, shares, g.memory_mib)
        a.isolation = f"mps:{pct}"
        a.device_uuid = g.uuid
        pipe = self.paths.mps / f"gpu{a.gpu_index}" / "pipe"
        logs = self.paths.mps / f"gpu{a.gpu_index}" / "log"
        for d in (pipe, logs):
            d.mkdir(parents=True, exist_ok=True)
        a.env = {
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(pct),
            "CUDA_MPS_PIPE_DIRECTORY": str(pipe),
            "CUDA_MPS_LOG_DIRECTORY": str(logs),
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={a.mem_limit_bytes // (1024 * 1024)}M",
        }
        return a

    def _planned_pct(self, gpu_index: int, job_id: int) -> int | None:
        """The helper's MPS percentage for this job, from the GPU's measured utilisations
        (`run/mps-plan-<node>.json`: {gpu: {job: percent}}); None when it has none."""
        path = self.paths.state_dir / "run" / f"mps-plan-{self.node}.json"
        try:
            doc = json.loads(path.read_text())
            pct = doc.get(str(gpu_index), {}).get(str(job_id))
        except (OSError, ValueError, AttributeError):
            return None
        if isinstance(pct, int) and not isinstance(pct, bool) and 1 <= pct <= 100:
            return pct
        return None

    def _apply_mps_plan(self, a: Assignment) -> None:
        pct = self._planned_pct(a.gpu_index, a.job_id)
        if pct is None or a.env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == str(pct):
            return
        log.info("job %d: MPS share %s%% -> %d%% (measured utilisation plan)", a.job_id,
                 a.env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), pct)
        a.env = {**a.env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(pct), "GPUPACK_ISOLATION": f"mps:{pct}"}
        a.isolation = f"mps:{pct}"

    # -- end --------------------------------------------------------------------------------
    def step_end(self, job_id: int, step_id: int) -> dict | None:
        """A step ended; the batch step's end is the job's end (its summary is returned)."""
        with self.lock:
            a = self.jobs.get(job_id)
            if a is None:
                return None
            if step_id in a.steps:
                a.steps.remove(step_id)
            if step_id == BATCH_STEP:
                return self._finish(a, reason="batch step ended")
            self._save()
            return None

    def finish(self, job_id: int, reason: str = "asked") -> dict | None:
        with self.lock:
            a = self.jobs.get(job_id)
            return self._finish(a, reason) if a else None

    def _finish(self, a: Assignment, reason: str) -> dict:
        """Write the job's summary, free its memory records and MIG instance, forget it."""
        self._sample_one(a, self.clock())
        summary = self.summary(a, reason)
        write_json_atomic(final_path(self.paths.state_dir, self.node, a.job_id), summary)
        mem_of = getattr(self.backend, "memory_of", None)
        if a.device_uuid and mem_of is not None:
            # the job's processes are gone: the driver gets its memory back
            for dev in mem_of(a.owner):
                self.backend.free_memory(dev, a.owner)
        if a.kind in ("mig", "whole") and a.gi_id is not None and a.created_instance:
            keep = a.kind == "mig" and self.layout_policy != "off"  # left idle for the next job of its size
            try:
                if hasattr(self.backend, "set_owner"):
                    self.backend.set_owner(a.gpu_index, a.gi_id, None)
                if not keep:
                    self.backend.destroy_instance(a.gpu_index, a.gi_id)
                    self.reconfigurations += 1
            except MigError as exc:
                log.error("job %d: could not free its %s on GPU %d: %s", a.job_id, a.profile, a.gpu_index, exc)
        if hasattr(self.backend, "forget"):
            self.backend.forget(a.owner)
        self.jobs.pop(a.job_id, None)
        self.recent.pop(a.job_id, None)
        self._save()
        log.info("job %d ended (%s): peak %.2f GiB, %s iterations", a.job_id, reason,
                 summary["peak_mem_bytes"] / 2**30, summary["iterations"])
        return summary

    def summary(self, a: Assignment, reason: str) -> dict:
        now = self.clock()
        return {
            "job_id": a.job_id, "node": self.node, "gpu_index": a.gpu_index,
            "isolation": a.isolation, "shards": a.shards, "workload": a.workload,
            "peak_mem_bytes": a.peak_mem_bytes,
            "mean_util_pct": a.util_sum / a.util_n if a.util_n else None,
            "mean_throughput": a.throughput_sum / a.throughput_n if a.throughput_n else None,
            "iterations": a.iterations, "samples": a.samples,
            "started_at": a.started_at, "ended_at": now, "end_reason": reason,
            "rejected_reports": a.rejected_reports,
        }

    # -- reports and samples --------------------------------------------------------------
    def report(self, job_id: int, peer: Peer, body: dict) -> dict:
        """A job's report about itself; answers with its GPU neighbours' workloads."""
        with self.lock:
            a = self.jobs.get(job_id)
            if a is None:
                raise ReportRejected(f"job {job_id} is not isolated on {self.node}")
            check_reporter(job_id, str(body.get("token", "")), a.token, peer)
            now = self.clock()
            try:
                ok = self.guard.check(body, a.iterations, a.last_report_at, a.started_at, now)
            except ReportRejected:
                a.rejected_reports += 1
                raise
            a.iterations, a.last_report_at = ok.iterations, now
            a.throughput = ok.throughput if ok.throughput is not None else a.throughput
            a.util_pct = ok.util_pct if ok.util_pct is not None else a.util_pct
            a.workload = ok.workload or a.workload
            a.reports += 1
            self._dirty = True
            return {"status": "ok", "neighbours": self.neighbours(a)}

    def neighbours(self, a: Assignment) -> list[str]:
        return [b.workload or "unknown" for b in self.jobs.values()
                if b.job_id != a.job_id and b.gpu_index == a.gpu_index and b.gpu_index >= 0]

    def _memory(self, a: Assignment) -> tuple[int, int]:
        mem_of = getattr(self.backend, "memory_of", None)
        if mem_of is not None:
            recs = mem_of(a.owner)
            return (sum(r["current"] for r in recs.values()), max((r["peak"] for r in recs.values()), default=0))
        if a.gpu_index < 0:
            return 0, 0
        used = sum(p.used_bytes for p in self.backend.process_memory(a.gpu_index, a.gi_id)
                   if p.owner == a.owner)
        return used, max(used, a.peak_mem_bytes)

    def _sample_one(self, a: Assignment, now: float, counted: CounterReading | None = None) -> JobSample:
        """One sample of the job; its utilisation from the GPU's counters when they gave
        one this round (``counted``), else what the job reported (``util_source``)."""
        cur, peak = self._memory(a)
        a.last_mem_bytes = cur
        a.peak_mem_bytes = max(a.peak_mem_bytes, peak, cur)
        a.samples += 1
        if counted is not None and counted.util_pct is not None:
            util, source = counted.util_pct, counted.source
        elif a.util_pct is not None:
            util, source = a.util_pct, "report"
        else:
            util, source = None, counted.source if counted is not None else None
        if util is not None:
            a.util_sum += util
            a.util_n += 1
        if a.throughput is not None:
            a.throughput_sum += a.throughput
            a.throughput_n += 1
        sample = JobSample(job_id=a.job_id, node=self.node, gpu_index=a.gpu_index, at=now,
                           mem_bytes=cur, peak_mem_bytes=a.peak_mem_bytes, util_pct=util,
                           throughput=a.throughput, iterations=a.iterations,
                           isolation=a.isolation, started_at=a.started_at, util_source=source)
        self.recent.setdefault(a.job_id, deque(maxlen=SAMPLES_KEPT)).append(sample)
        return sample

    def tick(self) -> None:
        """Sample every job once."""
        with self.lock:
            now = self.clock()
            counted = self.counters.read(self.jobs.values())
            for a in list(self.jobs.values()):
                try:
                    self._sample_one(a, now, counted.get(a.job_id))
                except MigError as exc:
                    log.warning("job %d: cannot read its memory: %s", a.job_id, exc)
            if self.jobs:
                self._save()

    def samples(self, job_id: int | None = None, since: float | None = None,
                latest: bool = False) -> list[dict]:
        with self.lock:
            ids = [job_id] if job_id is not None else sorted(self.recent)
            out: list[dict] = []
            for j in ids:
                buf = self.recent.get(j)
                if not buf:
                    continue
                if latest:
                    out.append(buf[-1].to_dict())
                else:
                    out.extend(s.to_dict() for s in buf if since is None or s.at > since)
            return out

    # -- reconcile --------------------------------------------------------------------------
    def reconcile(self, at_start: bool = False) -> list[str]:
        """Make the assignments, the GPU and Slurm agree; returns what was done."""
        done: list[str] = []
        with self.lock:
            if at_start:
                done += self._reconcile_gpu()
            running = self.list_running_jobs() if self.list_running_jobs else None
            if running is None:
                if done:
                    self._save()
                return done
            now = self.clock()
            for a in list(self.jobs.values()):
                if a.job_id in running or now - a.created_at < RECONCILE_GRACE_S:
                    continue
                self._finish(a, reason="job no longer running in Slurm")
                done.append(f"job {a.job_id}: gone from Slurm, isolation freed")
            if at_start:
                done += self._orphans(running)
            if done:
                self._save()
        for line in done:
            log.info("reconcile: %s", line)
        return done

    def _reconcile_gpu(self) -> list[str]:
        done = []
        for a in self.jobs.values():
            if a.kind != "mig" and not (a.kind == "whole" and a.gi_id is not None):
                continue
            insts = {i.gi_id: i for i in self.backend.list_instances(a.gpu_index)}
            inst = insts.get(a.gi_id)
            if inst is None or inst.uuid != a.device_uuid:
                a.notes.append("MIG instance missing after agent restart")
                done.append(f"job {a.job_id}: its {a.profile}@{a.start} is gone from GPU {a.gpu_index}")
            elif inst.owner != a.owner and hasattr(self.backend, "set_owner"):
                self.backend.set_owner(a.gpu_index, a.gi_id, a.owner)
                done.append(f"job {a.job_id}: re-marked its {a.profile}@{a.start} as held")
        return done

    def _orphans(self, running: set[int]) -> list[str]:
        """Instances held by a job the state does not know (the agent died mid-isolate)."""
        done = []
        for g in self.backend.list_gpus():
            if not g.mig_enabled:
                continue
            for inst in self.backend.list_instances(g.index):
                if not inst.owner or not str(inst.owner).isdigit():
                    continue
                job_id = int(inst.owner)
                if job_id in self.jobs:
                    continue
                if job_id in running:
                    now = self.clock()
                    kind = "whole" if inst.size == self.backend.catalog(g.index).memory_slices else "mig"
                    a = Assignment(job_id, self.node, g.index, kind,
                                   "whole" if kind == "whole" else f"mig:{inst.profile}@{inst.start}",
                                   profile=inst.profile, start=inst.start, gi_id=inst.gi_id,
                                   device_uuid=inst.uuid, created_instance=True,
                                   token=secrets.token_hex(16), created_at=now, started_at=now,
                                   notes=["adopted after an agent restart"])
                    self.jobs[job_id] = a
                    done.append(f"job {job_id}: adopted its {inst.profile}@{inst.start} on GPU {g.index}")
                else:
                    mem_of = getattr(self.backend, "memory_of", None)
                    if mem_of is not None:
                        for dev in mem_of(inst.owner):
                            self.backend.free_memory(dev, inst.owner)
                    self.backend.set_owner(g.index, inst.gi_id, None)
                    self.backend.destroy_instance(g.index, inst.gi_id)
                    done.append(f"job {job_id}: ended while the agent was down; destroyed its "
                                f"{inst.profile}@{inst.start} on GPU {g.index}")
        return done

    def status(self) -> dict:
        with self.lock:
            return {
                "node": self.node, "mode": self.mode, "layout_policy": self.layout_policy,
                "reconfigurations": self.reconfigurations,
                "jobs": {str(k): {"gpu_index": a.gpu_index, "isolation": a.isolation,
                                  "device": a.device_uuid, "steps": a.steps, "workload": a.workload,
                                  "iterations": a.iterations, "peak_mem_bytes": a.peak_mem_bytes}
                         for k, a in sorted(self.jobs.items())},
                "instances": self._instances(),
            }

    def _instances(self) -> dict[str, list[dict]]:
        """Every MIG instance on each MIG-mode GPU (idle ones too: laid out for the queue)."""
        out: dict[str, list[dict]] = {}
        try:
            for g in self.backend.list_gpus():
                if g.mig_enabled:
                    out[str(g.index)] = [{"profile": i.profile, "start": i.start, "size": i.size, "owner": i.owner}
                                         for i in self.backend.list_instances(g.index)]
        except MigError as exc:
            log.info("cannot list MIG instances for status: %s", exc)
        return out

    def run_loops(self, stop: threading.Event, sample_interval: float = 1.0,
                  reconcile_interval: float = 5.0) -> None:
        next_reconcile = 0.0
        while not stop.is_set():
            try:
                self.tick()
                if time.monotonic() >= next_reconcile:
                    self.reconcile()
                    next_reconcile = time.monotonic() + reconcile_interval
            except Exception:  # a bad tick must not end the agent
                log.exception("agent loop failed; trying again")
            stop.wait(sample_interval)


def is_job_step(step_id: int) -> bool:
    return step_id != EXTERN_STEP
