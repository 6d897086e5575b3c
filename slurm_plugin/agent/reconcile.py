"""Making the node agent's assignments, the GPU and Slurm agree (after a restart, and every few seconds).

- an assignment whose job Slurm no longer runs is finished (its isolation freed), once the
  job is older than :data:`RECONCILE_GRACE_S` (squeue lags behind a new job) and a job list
  made after the agent first saw the assignment leaves it out: the helper pushes one list a
  round, after the round's listing, so the :data:`LISTS_TO_TRUST`-th list to arrive after a
  moment was made after it. A round's cycle stretches with the round (the helper's duty cap),
  far past the grace on a loaded machine, and a list made before a job started must not free
  it (seen: a running job's isolation freed and its reports refused);
- at start and every round after, an assignment whose MIG instance is gone is noted, and one
  whose instance lost its owner mark is marked again; so are the jobs of an MPS-shared MIG
  instance that is gone (each noted, its device forgotten: :meth:`.mps_shares.MpsShares.watch`
  then stops the instance's daemon and clears its compute-mode mark, as no job wants them any
  more). At start that is a node reboot or a driver reload; under a running agent, a GPU reset
  or an instance destroyed outside the agent (an agent holding NVML keeps the driver loaded).
  A GPU whose instances cannot be listed is checked the next round;
- at start, an instance held by a job the state does not know (the agent died mid-isolate)
  is adopted when Slurm still runs the job, and destroyed when it does not (simulated-GPU
  backend: its instances carry an owner mark);
- at start, the slice journal (:mod:`.journal`) gives back the slices of running jobs that
  ``state.json`` lost (NVML keeps no owner, and a job between two steps has no process on its
  slice); a journaled slice gone from the GPU (a node reboot, a driver reload) is closed;
  a slice no journal line accounts for is left alone and said so ("unsure"), until Slurm
  shows that no job of this node is unknown to the agent and nothing runs on it.
"""
from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

from mig.backend import MigInstance
from mig.errors import MigDisabledError, MigError
from slurm_plugin.agent.finals import free_memory_of
from slurm_plugin.agent.journal import SliceJournal
from slurm_plugin.agent.state import Assignment

log = logging.getLogger(__name__)

RECONCILE_GRACE_S = 10.0  # a job isolated this recently is not freed because squeue lags
LISTS_TO_TRUST = 2  # lists taken since an assignment was first seen before one may free it
JobLister = Callable[[], "set[int] | None"]  # running job ids on this node; None = Slurm unreachable
ListCount = Callable[[], int]  # how many job lists the lister has taken (slurm_jobs.PushedJobs.lists)
Finisher = Callable[[Assignment, str], object]  # frees a job's isolation and forgets it
SliceDropper = Callable[[int, MigInstance, str], None]  # destroys an ended job's instance (GPU, instance, why)


class Reconciler:
    """Compares the assignments with the GPU and with the jobs Slurm runs on this node."""

    def __init__(self, node: str, backend, running_jobs: JobLister, finish: Finisher,
                 clock: Callable[[], float], journal: SliceJournal | None = None,
                 unsure: set[str] | None = None, lists_taken: ListCount | None = None, *,
                 drop_slice: SliceDropper):
        """``drop_slice``: destroys a MIG instance whose job ended while the agent was down
        (the MIG manager's, through the GPU's desired layout)."""
        self.node = node
        self.backend = backend
        self.running_jobs = running_jobs
        self.finish = finish
        self.clock = clock
        self.journal = journal
        self.unsure = unsure if unsure is not None else set()
        self.lists_taken = lists_taken  # None: a lister without a count; the grace alone
        self.drop_slice = drop_slice
        self._first_seen: dict[tuple[int, float], int | None] = {}  # run -> lists taken when first seen

    def run(self, jobs: dict[int, Assignment], at_start: bool = False) -> list[str]:
        """Reconcile ``jobs`` (changed in place); returns what was done, one line each."""
        done: list[str] = []
        if at_start:
            done += self.from_journal(jobs)
        done += self.gpu(jobs, at_start)
        lists = self.lists_taken() if self.lists_taken is not None else None  # before the list itself
        self._note(jobs, lists)
        running = self.running_jobs()
        if running is None:
            if at_start and self.unsure:
                done.append("Slurm does not answer: slices no journal accounts for stay untouched")
            for line in done:
                log.info("reconcile: %s", line)
            return done
        now = self.clock()
        for a in list(jobs.values()):
            if a.job_id in running or now - a.created_at < RECONCILE_GRACE_S or not self._listed_since(a, lists):
                continue
            self.finish(a, "job no longer running in Slurm")
            done.append(f"job {a.job_id}: gone from Slurm, isolation freed")
        if at_start:
            done += self.orphans(jobs, running)
        done += self.settle_unsure(jobs, running)
        for line in done:
            log.info("reconcile: %s", line)
        return done

    def _note(self, jobs: dict[int, Assignment], lists: int | None) -> None:
        """Remember how many lists were taken when each run was first seen; forget ended runs."""
        self._first_seen = {r: self._first_seen.get(r, lists) for r in (_run(a) for a in jobs.values())}

    def _listed_since(self, a: Assignment, lists: int | None) -> bool:
        """Whether the list in hand was made after the reconciler first saw the run (a lister
        without a count: the grace alone decides)."""
        if lists is None:
            return True
        first = self._first_seen.get(_run(a))
        return first is not None and lists >= first + LISTS_TO_TRUST

    def gpu(self, jobs: dict[int, Assignment], at_start: bool = False) -> list[str]:
        """Each assignment's MIG instance as the GPU has it now."""
        done = []
        listed: dict[int, dict[int, MigInstance] | None] = {}
        for a in jobs.values():
            mps_in_mig = a.kind == "mps" and a.gi_id is not None
            if a.gi_id is None or (a.kind not in ("mig", "whole") and not mps_in_mig):
                continue  # no instance (a whole GPU without MIG, or one already noted gone)
            if a.gpu_index not in listed:
                listed[a.gpu_index] = self._instances(a.gpu_index)
            insts = listed[a.gpu_index]
            if insts is None:
                continue
            inst = insts.get(a.gi_id)
            if inst is None or inst.uuid != a.device_uuid:
                a.notes.append("MIG instance missing after agent restart (node reboot or driver reload?)" if at_start
                               else "MIG instance gone from the GPU while the agent ran (GPU reset, or destroyed "
                                    "outside the agent?)")
                done.append(f"job {a.job_id}: its {a.profile}@{a.start} is gone from GPU {a.gpu_index}")
                if self.journal is not None:
                    self.journal.release(a, kept=False)
                # never destroy by a GI id that a new instance may have taken
                a.gi_id, a.created_instance = None, False
                if mps_in_mig:  # no MPS device any more: no daemon, no compute mode to hold
                    a.device_uuid = None
            elif inst.owner != a.owner and not mps_in_mig and hasattr(self.backend, "set_owner"):
                self.backend.set_owner(a.gpu_index, a.gi_id, a.owner)
                done.append(f"job {a.job_id}: re-marked its {a.profile}@{a.start} as held")
        return done

    def _instances(self, gpu_index: int) -> dict[int, MigInstance] | None:
        """The GPU's MIG instances by GPU instance id ({} with MIG off: a reset took them); None
        when they cannot be listed now (nothing is concluded from that)."""
        try:
            return {i.gi_id: i for i in self.backend.list_instances(gpu_index)}
        except MigDisabledError:
            return {}
        except MigError as exc:
            log.warning("reconcile: cannot list GPU %d's MIG instances (%s); its slices are checked next round",
                        gpu_index, exc)
            return None

    def live(self) -> dict[str, MigInstance]:
        return self._live()

    def _live(self) -> dict[str, MigInstance]:
        """Every MIG instance on the node's MIG-mode GPUs, by MIG device UUID."""
        return {i.uuid: i for g in self.backend.list_gpus() if g.mig_enabled
                for i in self.backend.list_instances(g.index) if i.uuid}

    def from_journal(self, jobs: dict[int, Assignment]) -> list[str]:
        """Slices the journal says are held, checked against the GPU; what no one accounts for."""
        if self.journal is None:
            return []
        view = self.journal.replay()
        live = self._live()
        done = [f"slice journal: {view.skipped} unreadable line(s) skipped"] if view.skipped else []
        for uuid, a in sorted(view.held.items(), key=lambda kv: kv[1].job_id):
            if a.job_id in jobs:
                continue  # state.json has the job
            if uuid not in live:
                self.journal.release(a, kept=False)
                done.append(f"job {a.job_id}: its {a.profile}@{a.start} on GPU {a.gpu_index} is gone "
                            f"(node reboot or driver reload); journal entry closed")
                continue
            a.notes.append("restored from the slice journal (state.json lost)")
            jobs[a.job_id] = a
            done.append(f"job {a.job_id}: {a.profile}@{a.start} on GPU {a.gpu_index} is its slice again "
                        f"(from the journal; state.json had lost it)")
        held = {a.device_uuid for a in jobs.values() if a.device_uuid}
        for uuid, inst in sorted(live.items()):
            if uuid not in held and uuid not in view.idle and not inst.owner:
                self.unsure.add(uuid)
                done.append(f"GPU {inst.gpu_index}: {inst.profile}@{inst.start} ({uuid}) is in no journal "
                            f"line: left alone until no unknown job can hold it")
        self.journal.forget_gone(set(live))
        return done

    def settle_unsure(self, jobs: dict[int, Assignment], running: set[int]) -> list[str]:
        """Slices left alone become idle once every job Slurm runs here is one the agent knows
        and no process is on them."""
        if not self.unsure:
            return []
        unknown = running - set(jobs)
        if unknown:
            return []
        try:
            live = self._live()
        except MigError as exc:
            log.info("cannot list MIG instances to settle unsure slices: %s", exc)
            return []
        done = []
        for uuid in sorted(self.unsure):
            inst = live.get(uuid)
            if inst is not None and inst.busy:
                continue
            self.unsure.discard(uuid)
            if inst is not None:
                if self.journal is not None:
                    self.journal.idle(uuid)
                done.append(f"GPU {inst.gpu_index}: {inst.profile}@{inst.start} is idle (every job "
                            f"Slurm runs here is known, nothing runs on it)")
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
                    self.drop_slice(g.index, inst, f"job {job_id} ended while the agent was down")
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


def _run(a: Assignment) -> tuple[int, float]:
    """One run of a job on this node (a requeued job isolated here again is another)."""
    return a.job_id, a.created_at
