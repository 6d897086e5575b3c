"""Where a packed job's MIG slice comes from: its profile, and the one placement sequence.

One rule for the node agent and the simulator (both reach it through
``packer.rules.SuiteRules``: ``mig_profile``, ``mig_slice``):

1. the profile: the rung of the GPU model's share ladder that holds the job's shares
   (``mig.share_ladder``), or with no safe ladder for the share count the smallest profile
   that holds them as memory slices (one share = one memory slice); sized by memory only: the packer's shares are memory shares, and the
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
from mig.share_ladder import LadderError, model_ladder


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


def profile_for_share_count(catalog: Catalog, shards: int, shares_per_gpu: int | None) -> Profile | None:
    """The MIG profile of a packed job holding ``shards`` of ``shares_per_gpu`` shares (None:
    the model's own count): the profile of the rung that holds it on the model's share
    ladder (``mig.share_ladder``: any combination of rungs Slurm gives is placeable; a count
    between rungs, asked for around the packer, takes the next rung's profile and may not
    place). With a share count no ladder makes safe (e.g. 8 on an H100): one shard per memory
    slice (:func:`profile_for_shards`). None when the count is above the GPU's shares."""
    try:
        ladder = model_ladder(catalog.model, shares_per_gpu)
    except LadderError:
        return profile_for_shards(catalog, shards)
    if not 1 <= shards <= ladder.shares_per_gpu:
        return None
    return catalog.profile(ladder.profile_for(shards))


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
