"""The MIG policies as :class:`~simulator.policy.Policy` objects.

- ``mig-static``: a fixed share of GPUs partitioned once (``mig_static_layout``); a job
  takes the smallest idle instance that holds its memory, or a whole unpartitioned GPU;
- ``mig-in-order`` / ``mig-by-size``: instances made on demand with the node agent's rule
  (``SuiteRules.mig_slice``, ``mig.slice_rule``): an idle one of the job's size, else one
  created where the run's placement policy puts it (by-size: an empty GPU gets a
  homogeneous layout of that size first), else idle instances merged or split. Which GPU
  is tried first is the replay's scheduling (Slurm's, live). The GPUs' partition states
  are the loop's.
"""
from __future__ import annotations

import math
from itertools import islice

from mig.fsm import PartitionState, Placement
from mig.layout import homogeneous_layout
from mig.slice_rule import SlicePlan

from simulator.policy import Policy, PolicyHandles

from simulator.scheduling import Backfill
from simulator.state import Job


class MigStaticPolicy(Policy):
    name = "mig-static"
    uses_mig = True

    def place(self, job: Job, now: float, bf: Backfill | None) -> bool:
        prof = next((p for p in self.mig.static_profiles if (p.memory_mib << 20) >= max(
            job.mem0, job.remembered)), None)
        if prof is None:
            if not self.idle or not self.sched.may_take_idle(job, now, bf, 1):
                return False
            self.cluster.start_whole(job, [next(iter(self.idle))], now)
            return True
        slots = self.mig.idle_inst.get(prof.name)
        if not slots:
            return False
        gid, p = next(iter(slots))
        self.cluster.start_instance(job, self.gpus[gid], p, now)
        return True


class MigDynamicPolicy(Policy):
    """Instances made on demand; ``by_size`` (mig-by-size) or not (mig-in-order)."""

    uses_mig = True
    by_size: bool = False

    def __init__(self, h: PolicyHandles):
        super().__init__(h)
        self._slice_cache: dict = {}

    def shape(self, job: Job) -> tuple:
        return ("m", self.mig.profile_for(job).name)

    def place(self, job: Job, now: float, bf: Backfill | None) -> bool:
        prof = self.mig.profile_for(job)
        name = prof.name
        slots = self.mig.idle_inst[name]
        if slots:
            gid, p = next(iter(slots))
            g = self.gpus[gid]
            if g.busy or self.sched.may_take_idle(job, now, bf, 1):
                self.cluster.start_instance(job, g, p, now)
                return True
        full = self.catalog.memory_slices
        by_size = self.by_size
        # by-size: an empty GPU first (a homogeneous layout of this size); in-order: tightest fit
        order = ([full, *range(prof.memory_slices, full)] if by_size
                 else range(prof.memory_slices, full + 1))
        tried = 0
        for n in order:
            for gid in list(self.mig.by_free[n]):
                g = self.gpus[gid]
                if g.busy == 0 and not self.sched.may_take_idle(job, now, bf, 1):
                    continue
                if by_size and not g.inst:
                    layout = homogeneous_layout(g.state, name)
                    for p in layout.placements:
                        if p not in g.inst:
                            self.mig.create(g, p)
                    self.mig.refresh_free(g)
                    p = next(q for q in g.inst if q.profile == name and g.inst[q] is None)
                    self.cluster.start_instance(job, g, p, now)
                    return True
                start = self._slice(g.state, name, ()).start  # no idle instance of its own to give
                if start is not None:
                    p = Placement(name, start)
                    self.mig.create(g, p)
                    self.cluster.start_instance(job, g, p, now)
                    return True
                tried += 1
                if tried > 64:
                    break
            if tried > 64:
                break
        for gid in list(islice(self.mig.has_idle, 64)):
            g = self.gpus[gid]
            if g.whole or g.static:
                continue
            if g.busy == 0 and not self.sched.may_take_idle(job, now, bf, 1):
                continue
            idle = tuple(sorted(p for p, j in g.inst.items() if j is None))
            plan = self._slice(g.state, name, idle)
            if not plan.feasible:
                continue
            for p in plan.destroy:
                self.mig.destroy(g, p)
            target = Placement(name, plan.start)
            if not plan.reuse:
                self.mig.create(g, target)
            self.cluster.start_instance(job, g, target, now)
            return True
        return False

    def _slice(self, state: PartitionState, profile: str, idle: tuple[Placement, ...]) -> SlicePlan:
        """The run's ``SuiteRules.mig_slice`` (the node agent's rule), memoised on (state,
        idle instances, profile): a GPU has few distinct states."""
        key = (state.mask, profile, idle)
        hit = self._slice_cache.get(key)
        if hit is None:
            hit = self._slice_cache[key] = self.rules.mig_slice(state, profile, idle)
        return hit


class MigInOrderPolicy(MigDynamicPolicy):
    """An instance where the FSM places it, on the tightest GPU first."""

    name = "mig-in-order"


class MigBySizePolicy(MigDynamicPolicy):
    """An empty GPU first, given a homogeneous layout of the job's size; the backfill pass
    tries the smallest instances first."""

    name = "mig-by-size"
    by_size = True

    def order(self, cand: list[Job]) -> list[Job]:
        cand.sort(key=lambda j: (self.mig.profile_for(j).memory_mib if j.gpus == 1 else math.inf,
                                 j.submit, j.id))
        return cand
