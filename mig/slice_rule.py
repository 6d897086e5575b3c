"""Where a packed job's MIG slice comes from: its profile, and the one placement sequence.

One rule for the node agent and the simulator (both reach it through
``packer.rules.SuiteRules``: ``mig_profile``, ``mig_slice``):

1. the profile: the smallest that holds the job's shares as memory slices (one share = one
   memory slice); sized by memory only: the packer's shares are memory shares, and the
   node does not know how busy the job will be when it places it;
2. on one GPU: an idle instance of that profile, else a new one where the placement policy
   (``mig.policies.choose``) puts it, else the fewest idle instances destroyed to make room
   (``mig.planner.plan_merge_split``).

Pure: partition states and placements in, a :class:`SlicePlan` out.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mig.catalog import Catalog, Profile
from mig.fsm import PartitionState, Placement
from mig.planner import plan_merge_split
from mig.policies import choose


def profile_for_shards(catalog: Catalog, shards: int) -> Profile | None:
    """The smallest MIG profile holding ``shards`` memory slices (one shard = one slice).

    Ties (1g.20gb vs 2g.20gb) go to fewer compute slices, leaving compute to the neighbours.
    Media-extension profiles are never chosen. None when no profile is that large.
    """
    if shards <= 0:
        return None
    fits = [p for p in catalog.profiles if p.memory_slices >= shards and not p.media_extensions]
    if not fits:
        return None
    return min(fits, key=lambda p: (p.memory_slices, p.compute_slices, p.memory_mib, p.name))


def partition_shards(catalog: Catalog) -> tuple[int, ...]:
    """The share counts a MIG slice can hold (its profiles' memory slices), smallest first."""
    return tuple(sorted({p.memory_slices for p in catalog.profiles if not p.media_extensions}))


@dataclass(frozen=True)
class SlicePlan:
    """How ``profile`` gets a slice on one GPU: the idle instance at ``start`` taken as it
    is (``reuse``), or ``destroy`` these idle instances and make one at ``start``; ``start``
    None: there is no room."""

    profile: str
    start: int | None
    reuse: bool = False
    destroy: tuple[Placement, ...] = ()

    @property
    def feasible(self) -> bool:
        return self.start is not None


def place_slice(state: PartitionState, profile: str, idle: Sequence[Placement], policy: str) -> SlicePlan:
    """The slice for ``profile`` on a GPU in ``state`` whose ``idle`` instances no job holds."""
    for p in idle:
        if p.profile == profile:
            return SlicePlan(profile, p.start, reuse=True)
    start = choose(state, profile, policy).start
    if start is not None:
        return SlicePlan(profile, start)
    idle_set = set(idle)
    plan = plan_merge_split(state, profile, busy=[p for p in state.placements if p not in idle_set])
    if not plan.feasible:
        return SlicePlan(profile, None)
    return SlicePlan(profile, plan.start, destroy=tuple(plan.destroy))
