"""One GPU's next layout step toward the queue, by the MIG thesis' layout policies (4.3).

The node agent calls :func:`layout_step` with the GPU's partition state, the instances in
use and the MIG profiles the pending jobs need (queue order). The answer names idle
instances to destroy and instances to create, so that the next jobs find a slice ready;
busy instances are never touched.

- ``by-size`` (policy A): the idle space is laid out as homogeneous slices of the size most
  pending jobs need (ties: the size of the job nearest the head). It changes the layout only
  when that gives more slices of that size than the idle space already holds, so a steady
  queue causes no reconfigurations.
- ``in-order`` (policy B): first in, first out. Each pending job in turn claims an idle slice
  of its size, else a new one placed by the future-reachability state machine, else the
  smallest merge/split of idle slices; the walk stops at the first job that cannot be
  served (FIFO: nobody overtakes it).
- ``off``: nothing; the agent creates each job's slice when the job starts.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mig.errors import MigError
from mig.fsm import PartitionState, Placement
from mig.layout import homogeneous_layout
from mig.planner import plan_merge_split
from mig.policies import choose

LAYOUT_POLICIES = ("in-order", "by-size", "off")
MAX_LOOKAHEAD = 16  # pending jobs one GPU prepares for


@dataclass(frozen=True)
class LayoutStep:
    """Idle instances to destroy, then instances to create (all idle, ready for jobs)."""

    destroy: tuple[Placement, ...] = ()
    create: tuple[Placement, ...] = ()
    reason: str = "nothing to do"

    @property
    def changes(self) -> int:
        return len(self.destroy) + len(self.create)

    def to_dict(self) -> dict:
        return {"destroy": [p.to_dict() for p in self.destroy], "create": [p.to_dict() for p in self.create],
                "reason": self.reason}


def _only(state: PartitionState, keep: Iterable[Placement]) -> PartitionState:
    return PartitionState.from_placements(state.space, keep)


def layout_step(state: PartitionState, busy: Iterable[Placement], pending: Sequence[str],
                policy: str) -> LayoutStep:
    """The next step for one GPU. ``pending``: profile names, head of the queue first."""
    if policy not in LAYOUT_POLICIES:
        raise ValueError(f"unknown layout policy {policy!r}; choose one of {', '.join(LAYOUT_POLICIES)}")
    known = state.space.profile_pos
    pending = [p for p in pending if p in known][:MAX_LOOKAHEAD]
    if policy == "off" or not pending:
        return LayoutStep()
    busy_set = {p for p in busy if p in state}
    if policy == "by-size":
        return _by_size(state, busy_set, pending)
    return _in_order(state, busy_set, pending)


def _by_size(state: PartitionState, busy: set[Placement], pending: list[str]) -> LayoutStep:
    counts = Counter(pending)
    target = max(counts, key=lambda p: (counts[p], -pending.index(p)))
    idle = [p for p in state.placements if p not in busy]
    kept = [p for p in idle if p.profile == target]
    needed = counts[target] - len(kept)
    if needed <= 0:
        return LayoutStep(reason=f"by-size: {len(kept)} idle {target} already wait for {counts[target]} pending")
    # first the free space alone, then (if that gives more) the idle slices of other sizes too
    new = _new_slices(state, target)
    destroy: list[Placement] = []
    others = [p for p in idle if p.profile != target]
    if len(new) < needed and others:
        cleared = _only(state, [*busy, *kept])
        wider = _new_slices(cleared, target)
        if len(wider) > len(new):
            new = wider[:needed]
            destroy = _clearing(state, others, new)
    new = new[:needed]
    if not new:
        return LayoutStep(reason=f"by-size: no room for another {target} beside the busy slices")
    return LayoutStep(tuple(destroy), tuple(new),
                      f"by-size: {len(new)} more {target} for {counts[target]} pending")


def _new_slices(state: PartitionState, profile: str) -> list[Placement]:
    filled = homogeneous_layout(state, profile)
    return [p for p in filled.placements if p not in state]


def _clearing(state: PartitionState, others: list[Placement], new: list[Placement]) -> list[Placement]:
    """The idle slices to destroy so that ``new`` can be created: those sharing memory slices
    with it, or all of ``others`` when that is not enough (compute slices, instance limits)."""
    slot_of = state.space.slot_of
    wanted = 0
    for p in new:
        wanted |= slot_of[(p.profile, p.start)].mem_mask
    overlapping = [p for p in others if slot_of[(p.profile, p.start)].mem_mask & wanted]
    try:
        trial = state
        for p in overlapping:
            trial = trial.free(p.profile, p.start)
        for p in new:
            trial = trial.alloc(p.profile, p.start)
        return overlapping
    except MigError:
        return list(others)


def _in_order(state: PartitionState, busy: set[Placement], pending: list[str]) -> LayoutStep:
    claimed: set[Placement] = set(busy)
    destroy: list[Placement] = []
    create: list[Placement] = []
    served = 0
    for profile in pending:
        idle = next((p for p in state.placements if p.profile == profile and p not in claimed), None)
        if idle is not None:
            claimed.add(idle)
            served += 1
            continue
        start = choose(state, profile, "fsm").start
        if start is None:
            plan = plan_merge_split(state, profile, busy=list(claimed))
            if not plan.feasible:
                break  # FIFO: the rest wait behind this job
            for p in plan.destroy:
                state = state.free(p.profile, p.start)
                if p in create:
                    create.remove(p)
                else:
                    destroy.append(p)
            for p in plan.recreate:
                state = state.alloc(p.profile, p.start)
                create.append(p)
            start = plan.start
        state = state.alloc(profile, start)
        placed = Placement(profile, start)
        create.append(placed)
        claimed.add(placed)
        served += 1
    if not destroy and not create:
        return LayoutStep(reason=f"in-order: {served} pending served by idle slices" if served else
                          "in-order: the head of the queue waits for a busy slice")
    return LayoutStep(tuple(destroy), tuple(create), f"in-order: ready for {served} of {len(pending)} pending")
