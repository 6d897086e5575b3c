"""Shares per GPU and the ladder of share counts a packed job may hold, per GPU model, so
that every combination of shares Slurm can give is placeable as MIG instances. Pure.

Slurm counts shards per GPU and nothing else: it gives any multiset of requests whose sum
fits the GPU's count, in any order of arrivals and departures. A MIG GPU is not a count:
profiles have placements, a limit per profile, and the GPU a limit of compute slices. With
8 shares on an H100 and any 1-7 shards (a shard per memory slice), 8 x 1 fails on the 8th
(7 instances at most) and 3 + 5 has no placement at all; and even where a placement exists,
departures fragment the GPU (four quarters at 0, 2, 4, 6; the ones at 2 and 6 leave; a half
fits the free count but no free half exists).

A ladder that no sequence can defeat has two rungs: **one share**, a *unit* profile of which
the GPU holds ``shares_per_gpu`` instances at once on distinct placements (so any free share
has a free placement, whatever left before), and **every share**, the full-GPU profile (which
Slurm gives only to an empty GPU). :func:`ladder_for` picks that unit per model (the finest
by default, or the one an operator names); :func:`placeable` checks a ladder against the
catalogue. A request between the rungs is rounded up to the whole GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

from mig.catalog import Catalog, Profile


class LadderError(ValueError):
    """No ladder can be built from this unit profile; the message says why."""


@dataclass(frozen=True)
class ShareLadder:
    """The shares of one GPU model and the share counts (rungs) a packed job may hold."""

    model: str
    shares_per_gpu: int
    unit: str  # the profile of one share
    full: str  # the profile of every share (the whole GPU)
    unit_memory_mib: int

    @property
    def rungs(self) -> tuple[int, ...]:
        return (1, self.shares_per_gpu) if self.shares_per_gpu > 1 else (1,)

    def round_up(self, shares: int) -> int:
        """The rung that holds ``shares`` (a count between the rungs takes the whole GPU)."""
        if shares < 1 or shares > self.shares_per_gpu:
            raise ValueError(f"{shares} shares is outside 1..{self.shares_per_gpu} on {self.model}")
        return 1 if shares == 1 else self.shares_per_gpu

    def profile_for(self, shares: int) -> str:
        """The MIG profile of a rung."""
        return self.unit if self.round_up(shares) == 1 else self.full


def _full(catalog: Catalog) -> Profile:
    return max((p for p in catalog.profiles if not p.media_extensions),
               key=lambda p: (p.memory_slices, p.compute_slices))


def _disjoint_starts(p: Profile) -> list[int]:
    """Placements of ``p`` that do not overlap, greedily from the first."""
    out: list[int] = []
    for s in sorted(p.placement_starts):
        if not out or s >= out[-1] + p.memory_slices:
            out.append(s)
    return out


def unit_capacity(catalog: Catalog, unit: Profile) -> int:
    """How many instances of ``unit`` live at once: the instance limit, the non-overlapping
    placements and the compute slices, whichever is smallest."""
    return min(unit.max_instances, len(_disjoint_starts(unit)), catalog.compute_slices // unit.compute_slices)


def ladder_for(catalog: Catalog, unit: str | None = None) -> ShareLadder:
    """The ladder of ``catalog``'s model with ``unit`` (default: the smallest non-media profile,
    ties to fewer compute slices) as one share."""
    candidates = [p for p in catalog.profiles if not p.media_extensions]
    if unit is None:
        chosen = min(candidates, key=lambda p: (p.memory_slices, p.compute_slices, p.memory_mib))
    else:
        chosen = catalog.profile(unit)
        if chosen.media_extensions:
            raise LadderError(f"{unit} has media extensions: one per GPU, it cannot be a share of {catalog.model}")
    full = _full(catalog)
    n = unit_capacity(catalog, chosen) if chosen != full else 1
    return ShareLadder(catalog.model, n, chosen.name, full.name, chosen.memory_mib)


def placeable(catalog: Catalog, ladder: ShareLadder) -> list[str]:
    """Why the ladder could fail on this catalogue (empty: every combination fits, in any order)."""
    unit, full = catalog.profile(ladder.unit), catalog.profile(ladder.full)
    why = []
    if unit_capacity(catalog, unit) < ladder.shares_per_gpu:
        why.append(f"{ladder.shares_per_gpu} x {unit.name} do not fit at once "
                   f"(at most {unit_capacity(catalog, unit)})")
    if full.memory_slices != catalog.memory_slices and ladder.shares_per_gpu > 1:
        why.append(f"{full.name} is not the whole GPU")
    return why
