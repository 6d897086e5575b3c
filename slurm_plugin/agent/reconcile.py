"""Making the node agent's assignments, the GPU and Slurm agree (after a restart, and every few seconds).

- an assignment whose job Slurm no longer runs is finished (its isolation freed), once the
  job is older than :data:`RECONCILE_GRACE_S` (squeue lags behind a new job);
- at start, an assignment whose MIG instance is gone is noted, and one whose instance lost
  its owner mark is marked again;
- at start, an instance held by a job the state does not know (the agent died mid-isolate)
  is adopted when Slurm still runs the job, and destroyed when it does not.
"""
from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

from mig.backend import MigInstance
from slurm_plugin.agent.finals import free_memory_of
from slurm_plugin.agent.state import Assignment

log = logging.getLogger(__name__)

RECONCILE_GRACE_S = 10.0  # a job isolated this recently is not freed because squeue lags
JobLister = Callable[[], "set[int] | None"]  # running job ids on this node; None = Slurm unreachable
Finisher = Callable[[Assignment, str], object]  # frees a job's isolation and forgets it


class Reconciler:
    """Compares the assignments with the GPU and with the jobs Slurm runs on this node."""

    def __init__(self, node: str, backend, running_jobs: JobLister, finish: Finisher,
                 clock: Callable[[], float]):
        self.node = node
        self.backend = backend
        self.running_jobs = running_jobs
        self.finish = finish
        self.clock = clock

    def run(self, jobs: dict[int, Assignment], at_start: bool = False) -> list[str]:
        """Reconcile ``jobs`` (changed in place); returns what was done, one line each."""
        done: list[str] = []
        if at_start:
            done += self.gpu(jobs)
        running = self.running_jobs()
        if running is None:
            return done
        now = self.clock()
        for a in list(jobs.values()):
            if a.job_id in running or now - a.created_at < RECONCILE_GRACE_S:
                continue
            self.finish(a, "job no longer running in Slurm")
            done.append(f"job {a.job_id}: gone from Slurm, isolation freed")
        if at_start:
            done += self.orphans(jobs, running)
        for line in done:
            log.info("reconcile: %s", line)
        return done

    def gpu(self, jobs: dict[int, Assignment]) -> list[str]:
        """Each assignment's MIG instance as the GPU has it now."""
        done = []
        for a in jobs.values():
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

    def orphans(self, jobs: dict[int, Assignment], running: set[int]) -> list[str]:
        """Instances held by a job the state does not know (the agent died mid-isolate)."""
        done = []
        for g in self.backend.list_gpus():
            if not g.mig_enabled:
                continue
            for inst in self.backend.list_instances(g.index):
                if not inst.owner or not str(inst.owner).isdigit():
                    continue
                job_id = int(inst.owner)
                if job_id in jobs:
                    continue
                if job_id in running:
                    jobs[job_id] = self._adopt(job_id, g.index, inst)
                    done.append(f"job {job_id}: adopted its {inst.profile}@{inst.start} on GPU {g.index}")
                else:
                    free_memory_of(self.backend, inst.owner)
                    self.backend.set_owner(g.index, inst.gi_id, None)
                    self.backend.destroy_instance(g.index, inst.gi_id)
                    done.append(f"job {job_id}: ended while the agent was down; destroyed its "
                                f"{inst.profile}@{inst.start} on GPU {g.index}")
        return done

    def _adopt(self, job_id: int, gpu_index: int, inst: MigInstance) -> Assignment:
        """An assignment for a running job's instance the state had lost."""
        now = self.clock()
        kind = "whole" if inst.size == self.backend.catalog(gpu_index).memory_slices else "mig"
        return Assignment(job_id, self.node, gpu_index, kind,
                          "whole" if kind == "whole" else f"mig:{inst.profile}@{inst.start}",
                          profile=inst.profile, start=inst.start, gi_id=inst.gi_id,
                          device_uuid=inst.uuid, created_instance=True,
                          token=secrets.token_hex(16), created_at=now, started_at=now,
                          notes=["adopted after an agent restart"])
