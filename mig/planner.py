"""Merge/split planning: when a request does not fit, which idle instances to destroy.

:func:`plan_merge_split` looks for the smallest set of *idle* instances whose removal lets
the request be placed (merging neighbours or splitting a larger one), re-creates as many
of the removed instances as still fit elsewhere, and never touches a busy instance. When
nothing can be done it says why.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import combinations
from typing import Iterable

from mig.fsm import PartitionState, Placement
from mig.policies import choose

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MergeSplitPlan:
    """What to do so that ``profile`` fits: destroy, create the request, re-create."""

    profile: str
    feasible: bool
    start: int | None
    destroy: tuple[Placement, ...] = ()
    recreate: tuple[Placement, ...] = ()
    reachable_full_configs: int = 0
    reason: str = ""

    @property
    def steps(self) -> list[str]:
        out = [f"destroy {p}" for p in self.destroy]
        if self.start is not None:
            out.append(f"create {self.profile}@{self.start}")
        out += [f"create {p}" for p in self.recreate]
        return out

    def to_dict(self) -> dict:
        return {
            "profile": self.profile,
            "feasible": self.feasible,
            "start": self.start,
            "destroy": [p.to_dict() for p in self.destroy],
            "recreate": [p.to_dict() for p in self.recreate],
            "reachable_full_configs": self.reachable_full_configs,
            "steps": self.steps,
            "reason": self.reason,
        }


def _recreate(state: PartitionState, removed: Iterable[Placement]) -> tuple[PartitionState, tuple[Placement, ...]]:
    """Re-create removed instances (largest first) where the fsm policy puts them."""
    space = state.space
    done = []
    order = sorted(removed, key=lambda p: (-space.catalog.profile(p.profile).memory_slices, p.start))
    for p in order:
        start = choose(state, p.profile, "fsm").start
        if start is not None:
            state = state.alloc(p.profile, start)
            done.append(Placement(p.profile, start))
    return state, tuple(done)


def plan_merge_split(state: PartitionState, profile: str,
                     busy: Iterable[Placement | tuple[str, int]] = ()) -> MergeSplitPlan:
    """The smallest set of idle instances to destroy so that ``profile`` fits.

    ``busy`` lists the instances in use; every other instance of ``state`` is idle. Among
    plans destroying equally few instances, the one re-creating the most removed instances
    and then keeping the most full configurations reachable wins (ties: first found in
    start order).
    """
    space = state.space
    if profile not in space.profile_pos:
        space.slot(profile, -1)  # raises UnknownProfileError naming the valid profiles
    busy_set = {p if isinstance(p, Placement) else Placement(*p) for p in busy}
    direct = choose(state, profile, "fsm")
    if direct.start is not None:
        return MergeSplitPlan(profile, True, direct.start, (), (), direct.reachable_full_configs,
                              "fits without reconfiguration")
    current = state.placements
    idle = [p for p in current if p not in busy_set]
    for k in range(1, len(idle) + 1):
        best: tuple | None = None
        for combo in combinations(idle, k):
            reduced = state
            for p in combo:
                reduced = reduced.free(p.profile, p.start)
            choice = choose(reduced, profile, "fsm")
            if choice.start is None:
                continue
            after = reduced.alloc(profile, choice.start)
            final, recreated = _recreate(after, combo)
            key = (len(recreated), final.reachable_full_configs)
            if best is None or key > best[0]:
                best = (key, combo, choice.start, recreated, final)
        if best is not None:
            _, combo, start, recreated, final = best
            return MergeSplitPlan(
                profile, True, start, tuple(combo), recreated, final.reachable_full_configs,
                f"destroy {k} idle instance{'s' if k > 1 else ''} to make room",
            )
    blockers = ", ".join(str(p) for p in current if p in busy_set) or "nothing"
    reason = (
        f"{space.catalog.model}: {profile} cannot be placed even after destroying every idle "
        f"instance; busy instances {blockers} block it; wait for one of them to end"
    )
    log.info(reason)
    return MergeSplitPlan(profile, False, None, reason=reason)
