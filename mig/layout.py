"""Layout policies (by size; in order, with merge/split: MIG thesis 4.3), replayed on one GPU.

- :func:`by_size` (policy A): sort the queue by memory need, group jobs of one profile,
  lay the GPU out as homogeneous slices of that profile and run the group on them, then
  reconfigure for the next group. Fewest reconfigurations; unfair within a batch.
- :func:`in_order` (policy B): first in, first out. Each job takes an idle instance of its
  profile, else a new instance placed by the fsm policy, else a merge/split plan that
  destroys idle instances only; else it waits for a running job to end.

Both return a :class:`LayoutResult` with per-job times, the makespan and the number of
instance create/destroy operations (reconfigurations).
"""
from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass, field
from typing import Sequence

from mig.catalog import Catalog
from mig.fsm import PartitionState, Placement, get_space
from mig.planner import plan_merge_split
from mig.policies import choose

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LayoutJob:
    id: str
    memory_mib: float
    duration: float
    profile: str | None = None  # forced profile; else the smallest that holds memory_mib


@dataclass(frozen=True)
class ScheduledJob:
    id: str
    profile: str
    placement: Placement
    start_time: float
    end_time: float


@dataclass
class LayoutResult:
    policy: str
    jobs: list[ScheduledJob] = field(default_factory=list)
    unplaceable: list[str] = field(default_factory=list)
    creates: int = 0
    destroys: int = 0
    layouts: list[tuple[Placement, ...]] = field(default_factory=list)

    @property
    def reconfigurations(self) -> int:
        return self.creates + self.destroys

    @property
    def makespan(self) -> float:
        return max((j.end_time for j in self.jobs), default=0.0)

    def to_dict(self) -> dict:
        return {
            "policy": self.policy,
            "makespan": self.makespan,
            "reconfigurations": self.reconfigurations,
            "creates": self.creates,
            "destroys": self.destroys,
            "unplaceable": self.unplaceable,
            "jobs": [
                {"id": j.id, "profile": j.profile, "start": j.placement.start,
                 "start_time": j.start_time, "end_time": j.end_time}
                for j in self.jobs
            ],
        }


def _profile_of(catalog: Catalog, job: LayoutJob) -> str | None:
    if job.profile:
        catalog.profile(job.profile)
        return job.profile
    p = catalog.smallest_fitting(job.memory_mib)
    return p.name if p else None


def homogeneous_layout(state: PartitionState, profile: str) -> PartitionState:
    """Fill ``state`` with as many instances of ``profile`` as fit (fsm placement)."""
    while True:
        start = choose(state, profile, "fsm").start
        if start is None:
            return state
        state = state.alloc(profile, start)


def by_size(jobs: Sequence[LayoutJob], catalog: Catalog,
            profiles: tuple[str, ...] | None = None) -> LayoutResult:
    """Policy A: run the queue in groups of one size on homogeneous slices."""
    cat = catalog.restrict(profiles)
    space = get_space(catalog, profiles)
    res = LayoutResult("by-size")
    groups: dict[str, list[LayoutJob]] = {}
    for job in jobs:
        prof = _profile_of(cat, job)
        if prof is None:
            res.unplaceable.append(job.id)
            continue
        groups.setdefault(prof, []).append(job)
    order = sorted(groups, key=lambda p: (cat.profile(p).memory_mib, cat.profile(p).memory_slices,
                                          cat.profile(p).compute_slices))
    now = 0.0
    state = space.empty()
    for prof in order:
        layout = homogeneous_layout(space.empty(), prof)
        if layout != state:
            res.destroys += len(state.placements)
            res.creates += len(layout.placements)
            state = layout
            res.layouts.append(layout.placements)
        slots = [(now, i, p) for i, p in enumerate(layout.placements)]
        heapq.heapify(slots)
        group_end = now
        for job in groups[prof]:  # FIFO within the group
            free_at, i, place = heapq.heappop(slots)
            end = free_at + job.duration
            res.jobs.append(ScheduledJob(job.id, prof, place, free_at, end))
            heapq.heappush(slots, (end, i, place))
            group_end = max(group_end, end)
        now = group_end
    return res


def in_order(jobs: Sequence[LayoutJob], catalog: Catalog,
             profiles: tuple[str, ...] | None = None) -> LayoutResult:
    """Policy B: FIFO; reuse, create (fsm), merge/split idle instances, or wait."""
    cat = catalog.restrict(profiles)
    space = get_space(catalog, profiles)
    res = LayoutResult("in-order")
    state = space.empty()
    busy: dict[Placement, float] = {}  # placement -> end time
    now = 0.0
    queue = list(jobs)
    while queue:
        job = queue[0]
        prof = _profile_of(cat, job)
        if prof is None:
            res.unplaceable.append(job.id)
            queue.pop(0)
            continue
        # jobs that ended by now release their instance (kept, idle)
        for p in [p for p, t in busy.items() if t <= now]:
            del busy[p]
        place = next((p for p in state.placements if p.profile == prof and p not in busy), None)
        if place is None:
            start = choose(state, prof, "fsm").start
            if start is None:
                plan = plan_merge_split(state, prof, busy=list(busy))
                if plan.feasible:
                    for p in plan.destroy:
                        state = state.free(p.profile, p.start)
                    res.destroys += len(plan.destroy)
                    for p in plan.recreate:
                        state = state.alloc(p.profile, p.start)
                    res.creates += len(plan.recreate)
                    start = plan.start
            if start is not None:
                state = state.alloc(prof, start)
                res.creates += 1
                place = Placement(prof, start)
                res.layouts.append(state.placements)
        if place is None:
            if not busy:  # cannot happen for a profile of the catalogue; guard anyway
                res.unplaceable.append(job.id)
                queue.pop(0)
                continue
            now = min(busy.values())  # wait for the next job to end
            continue
        busy[place] = now + job.duration
        res.jobs.append(ScheduledJob(job.id, prof, place, now, now + job.duration))
        queue.pop(0)
    return res
