"""The node agent: materialises each job's isolation, samples jobs, reconciles after a restart.

It is an adapter and the coordinator of the socket protocol (:mod:`.server`): each request
is answered under one lock by its collaborators,

- :class:`.isolator.Isolator` makes a job's isolation (whole GPU, MIG slice, MPS share);
- :class:`.mig_manager.MigManager` the MIG instances (placement, idle slices, layouts), as
  each GPU's desired layout reached through :mod:`mig.apply`;
- :class:`.mps_shares.MpsShares` MPS shares and their control daemons (through the isolator);
- :class:`.sampler.Sampler` the jobs' samples (memory, utilisation counters);
- :class:`.reconcile.Reconciler` agreement with the GPU and with Slurm;
- :mod:`.finals` the summary a job leaves behind;
- :class:`.report_desk.ReportDesk` what a job says about itself, :class:`.oom_desk.OomDesk` its
  out-of-memory ends.

Which profile and where it goes are decided by :mod:`slurm_plugin.agent.isolation` and
:mod:`mig.policies`; the GPU is reached only through a :class:`mig.backend.GpuBackend`
(the simulated GPU here, NVML on real GPUs), and Slurm only through ``list_running_jobs``
(the job list the helper pushes over the link, :mod:`.slurm_jobs`).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable

from gpus.nvml.caps import DriverFiles
from packer.samples import JobSample
from slurm_plugin.agent import isolation as iso
from slurm_plugin.agent.adoption import adoption_refusal
from slurm_plugin.agent.counters import CounterReader
from slurm_plugin.agent.facts import FactsReader, gres_conf_path
from slurm_plugin.agent.fence import Fence, fence_for, prune_device_cgroups
from slurm_plugin.agent.finals import KeptFinals, free_memory_of, job_summary
from slurm_plugin.agent.isolator import Isolator
from slurm_plugin.agent.journal import SliceJournal
from slurm_plugin.agent.mig_desired import DesiredRecord
from slurm_plugin.agent.mig_manager import MigManager
from slurm_plugin.agent.oom_desk import OomDesk
from slurm_plugin.agent.oom_ends import OomEnds
from slurm_plugin.agent.paths import AgentError, AgentPaths, StepRefused, final_path, socket_path
from slurm_plugin.agent.plans import Generations, MpsPlanFile
from slurm_plugin.agent.reconcile import RECONCILE_GRACE_S, JobLister, Reconciler
from slurm_plugin.agent.report_desk import ReportDesk
from slurm_plugin.agent.restore import restore_slices
from slurm_plugin.agent.sampler import SAMPLES_KEPT, Sampler
from slurm_plugin.agent.state import BATCH_STEP, EXTERN_STEP, Assignment, StateFile, write_json_atomic
from slurm_plugin.agent.unisolated import UnisolatedSpool

log = logging.getLogger(__name__)

__all__ = ["AgentError", "AgentPaths", "JobLister", "NodeAgent", "RECONCILE_GRACE_S", "SAMPLES_KEPT",
           "final_path", "is_job_step", "socket_path"]


class NodeAgent:
    """One node's agent: its jobs' assignments, and the answers to the socket's requests."""

    def __init__(self, node: str, state_dir: Path, backend, *, isolation_mode: str = "mig",
                 shares_per_gpu: int | None = None, policy: str = "fsm",
                 list_running_jobs: JobLister | None = None, sim_dir: Path | None = None,
                 clock: Callable[[], float] = time.time, gres_conf: Path | None = None,
                 mps_control: str | list[str] | None = None, mps_in_mig_shares: int = 0,
                 python_site: Path | None = None):
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
        # the folder packed steps get in front of PYTHONPATH: the opt-in out-of-memory observer
        # (slurm_plugin/python_site), None where the site has not turned it on
        self.python_site = python_site
        self.driver = DriverFiles.for_node(sim_dir, node)  # the MIG capability files (the fence)
        self.clock = clock
        self.store = StateFile(self.paths.home)
        self.journal = SliceJournal(self.paths.home)
        self.lock = threading.RLock()
        self.jobs: dict[int, Assignment] = self.store.load()
        self.mig = MigManager(backend, policy, lambda: self.jobs.values(), journal=self.journal,
                              shares_per_gpu=shares_per_gpu,
                              desired=DesiredRecord(self.paths.mig_desired, node, clock))
        self.isolator = Isolator(self.paths, backend, self.mig, mode=isolation_mode,
                                 shares_per_gpu=shares_per_gpu, sim_dir=sim_dir, clock=clock,
                                 mps_control=mps_control, mps_in_mig_shares=mps_in_mig_shares)
        self.sampler = Sampler(node, backend)
        # what the helper checks it agrees with (shares per GPU, GPU model, versions)
        self.facts = FactsReader(node, backend, shares_per_gpu, gres_conf or gres_conf_path(), clock())
        self.kept_finals = KeptFinals(self.paths.kept_finals)  # until the helper acknowledges them
        # of the helper's per-node plans (layouts, job lists), kept across restarts
        self.generations = Generations(self.paths.generations)
        self.mps_plan = MpsPlanFile(self.paths.mps_plan)
        self.sampled_at: float | None = None  # the agent's time of its last sampling round
        # packed jobs' out-of-memory ends, until the helper answers (held longer when its cycle is)
        self.oom_ends = OomEnds(node, clock, pace=getattr(list_running_jobs, "pace_s", None))
        self.oom = OomDesk(self)  # what the SPANK plugin, the job and the helper say of those ends
        self.reports = ReportDesk(self)  # what a job says about itself (`gpupack report`)
        # packed steps the SPANK plugin did not let start, as root recorded them (until the helper reads them)
        self.unisolated = UnisolatedSpool(self.paths.unisolated, node, clock)
        self.unisolated.ensure()
        self.reconciler = Reconciler(node, backend, self._running_jobs, self._finish, clock,
                                     journal=self.journal, unsure=self.mig.unsure, drop_slice=self.mig.drop,
                                     lists_taken=self._lists_taken if hasattr(list_running_jobs, "lists") else None)

    # -- what the collaborators hold ------------------------------------------------------
    @property
    def reconfigurations(self) -> int:
        """MIG instances created or destroyed since the agent started."""
        return self.mig.reconfigurations

    @property
    def layout_policy(self) -> str:
        return self.mig.layout_policy

    @property
    def counters(self) -> CounterReader:
        return self.sampler.counters

    @property
    def recent(self) -> dict[int, deque[JobSample]]:
        return self.sampler.recent

    def _save(self) -> None:
        self.store.save(self.jobs)

    def _running_jobs(self) -> set[int] | None:
        return self.list_running_jobs() if self.list_running_jobs else None

    def _slurm_gpus(self, job_id: int) -> tuple[int, ...] | None:
        """The GPUs Slurm's record gives the job here (the helper's pushed list), None when unknown."""
        gpus_of = getattr(self.list_running_jobs, "gpus_of", None)
        return gpus_of(job_id) if gpus_of is not None else None

    def _slurm_shards(self, job_id: int) -> int | None:
        """The shards Slurm's record gives the job here (0: whole GPUs), None when unknown."""
        shards_of = getattr(self.list_running_jobs, "shards_of", None)
        return shards_of(job_id) if shards_of is not None else None

    def _lists_taken(self) -> int:
        return self.list_running_jobs.lists  # a PushedJobs: the helper's lists, counted

    # -- isolate ----------------------------------------------------------------------------
    def isolate(self, job_id: int, step_id: int, uid: int | None, env: dict[str, str]) -> Assignment:
        """The job's isolation for this step (made on its first step, reused by the others)."""
        grant, unbacked = iso.grant_within_record(iso.grant_from_env(env, step_id), self._slurm_shards(job_id))
        if unbacked is not None:
            log.warning("job %d step %d: %s", job_id, step_id, unbacked)
        recorded = self._slurm_gpus(job_id)
        why = iso.grant_outside_record(grant, recorded)
        if why is not None:
            if grant.packed:
                raise StepRefused(f"job {job_id} step {step_id}: {why}; a packed step is isolated only on a GPU "
                                  f"Slurm gave it")
            log.warning("job %d step %d: %s", job_id, step_id, why)
        with self.lock:
            a = self.jobs.get(job_id)
            if a is not None and (not grant.gpu_indexes or a.gpu_index in grant.gpu_indexes):
                if a.kind == "mps":
                    self.isolator.mps.apply_plan(a)  # a later step starts with the measured share
                if step_id not in a.steps:
                    a.steps.append(step_id)
                    self._save()
                return a
            if a is not None and (a.shards > 0 or grant.packed) and step_id not in iso.JOB_LEVEL_STEPS:
                # only a new run (its batch or interactive step) moves a packed job: an srun step
                # naming another GPU than the job's never frees nor remakes its isolation
                raise StepRefused(f"job {job_id} step {step_id} names GPU {list(grant.gpu_indexes)}, but the job "
                                 f"is isolated on GPU {a.gpu_index} of {self.node}; a packed job's step "
                                 f"runs only on its job's GPU")
            if a is not None:
                log.warning("job %d comes back on GPU %s (it had GPU %d): freeing the old isolation",
                            job_id, grant.gpu_indexes, a.gpu_index)
                self._finish(a, reason="moved")
            a = self.isolator.make(job_id, uid, grant)
            self.journal.assign(a)  # durable before the step is told where it runs
            a.steps.append(step_id)
            a.env = {**a.env, **self.isolator.base_env(a)}
            self.jobs[job_id] = a
            self._save()
            log.info("job %d on GPU %d: %s (%s)", job_id, a.gpu_index, a.isolation, a.device_uuid or "-")
            return a

    def fence(self, a: Assignment) -> Fence | None:
        """The capability nodes the job's steps may open (:mod:`.fence`); AgentError when a
        job on a MIG device cannot be fenced."""
        with self.lock:
            return fence_for(self.driver, self.backend, a)

    def follow_queue(self, policy: str, pending_shards: list[int], pending_jobs: list[int] | None = None) -> list[dict]:
        """Prepare idle MIG slices for the pending jobs (the helper's layout policy).

        ``pending_jobs``: the jobs of ``pending_shards``, in the same order, when the helper
        names them: one this agent already runs started since the helper read the queue, and
        no slice is laid out for it (it holds its own). Only idle instances are destroyed;
        returns the changes made, one dict each."""
        with self.lock:
            if pending_jobs:
                pending_shards = [s for s, j in zip(pending_shards, pending_jobs) if j not in self.jobs]
            return self.mig.follow_queue(policy, self.mode, pending_shards)

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
        self.sampler.sample(a, self.clock())
        summary = self.summary(a, reason)
        write_json_atomic(final_path(self.paths.state_dir, self.node, a.job_id), summary)
        self.kept_finals.put(summary)
        if a.device_uuid:
            free_memory_of(self.backend, a.owner)
        self.journal.release(a, kept=self.mig.release(a))
        if hasattr(self.backend, "forget"):
            self.backend.forget(a.owner)
        self.jobs.pop(a.job_id, None)
        self.isolator.mps.released(a)  # its device's MPS daemon stops with the last MPS job
        holder = self.isolator.mps.holder_after(a)
        if holder is not None:  # an MPS-shared MIG instance: the journal names a job that holds it
            self.journal.assign(holder)
        self.sampler.forget(a.job_id)
        self._save()
        log.info("job %d ended (%s): peak %.2f GiB, %s iterations", a.job_id, reason,
                 summary["peak_mem_bytes"] / 2**30, summary["iterations"])
        return summary

    def summary(self, a: Assignment, reason: str) -> dict:
        return job_summary(a, self.node, self.clock(), reason)

    # -- samples ---------------------------------------------------------------------------
    def tick(self) -> None:
        """Sample every job once."""
        with self.lock:
            self.sampled_at = self.clock()
            self.sampler.sample_all(self.jobs.values(), self.sampled_at)
            if self.jobs:
                self._save()

    def samples(self, job_id: int | None = None, since: float | None = None,
                latest: bool = False) -> list[dict]:
        with self.lock:
            return self.sampler.samples(job_id, since, latest)

    # -- reconcile and status ---------------------------------------------------------------
    def reconcile(self, at_start: bool = False) -> list[str]:
        """Make the assignments, the GPU and Slurm agree; returns what was done."""
        with self.lock:
            done = self.reconciler.run(self.jobs, at_start)
            done += self.isolator.mps.watch()
            if done:
                self._save()
        return done

    def journal_view(self) -> dict:
        """What the slice journal says holds, the slices no one accounts for, and the mark."""
        with self.lock:
            return {"held": self.journal.held_records(), "unsure": sorted(self.mig.unsure),
                    "mark": self.journal.mark()}

    def restore(self, records: list[dict]) -> dict:
        """Slices given back from the controller's copy of the journal, each confirmed with the
        GPU and the job list (:mod:`.restore`); what was taken and what was left alone."""
        with self.lock:
            out = restore_slices(records, self.jobs, self.mig.unsure, self.reconciler.live(),
                                 self._running_jobs(), self.journal, self.backend)
            if out.restored:
                self._save()
            return out.to_dict()

    def adoption_refusal(self, uid: int) -> str | None:
        """Why a login of ``uid`` must not be adopted into its job here (None: it may)."""
        with self.lock:
            return adoption_refusal(list(self.jobs.values()), uid)

    def status(self) -> dict:
        with self.lock:
            return {
                "node": self.node, "mode": self.mode, "layout_policy": self.layout_policy,
                "reconfigurations": self.reconfigurations,
                "jobs": {str(k): {"gpu_index": a.gpu_index, "isolation": a.isolation,
                                  "device": a.device_uuid, "steps": a.steps, "workload": a.workload,
                                  "iterations": a.iterations, "peak_mem_bytes": a.peak_mem_bytes}
                         for k, a in sorted(self.jobs.items())},
                "instances": self.mig.instances(), "desired_layouts": self.mig.desired_layouts(),
                "unsure_slices": sorted(self.mig.unsure),
            }

def run_loops(agent: NodeAgent, stop: threading.Event, sample_interval: float = 1.0,
              reconcile_interval: float = 5.0) -> None:
    """The agent's rounds until ``stop``: a sample every ``sample_interval``, a reconcile (and
    the pruning of ended steps' device cgroups) every ``reconcile_interval``."""
    next_reconcile = 0.0
    while not stop.is_set():
        try:
            agent.tick()
            if time.monotonic() >= next_reconcile:
                agent.reconcile()
                for line in prune_device_cgroups():  # the host's, not the agent's state: not in reconcile()
                    log.info("%s", line)
                next_reconcile = time.monotonic() + reconcile_interval
        except Exception:  # a bad tick must not end the agent
            log.exception("agent loop failed; trying again")
        stop.wait(sample_interval)


def is_job_step(step_id: int) -> bool:
    return step_id != EXTERN_STEP
