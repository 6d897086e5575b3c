"""The MIG partition state machine (the MIG partitioning thesis, 4.2, Algorithms 2 and 3).

A *state* is a set of (profile, placement start). Alloc and free are its transitions. A
state is valid when the instances do not overlap in memory slices, stay within the GPU's
compute slices, the per-profile instance limits and the single media-extension instance;
every such state extends to a *full configuration* (a state to which no instance can be
added). The *future reachability* of a state is the number of full configurations that
contain it.

Everything is precomputed once per (catalogue, profile subset) by :func:`get_space` and
cached. States are bitmasks over the catalogue's placements, so a decision is a handful
of dictionary look-ups.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

from mig.catalog import Catalog
from mig.errors import InvalidPlacementError, PlacementOccupiedError, UnknownProfileError

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True)
class Placement:
    """One GPU instance of a state: a profile at a start (in memory slices)."""

    profile: str
    start: int

    def __str__(self) -> str:
        return f"{self.profile}@{self.start}"

    def to_dict(self) -> dict:
        return {"profile": self.profile, "start": self.start}


@dataclass(frozen=True)
class _Slot:
    pid: int  # bit index in a state mask
    profile_index: int  # index in space.profiles
    start: int
    mem_mask: int


class PartitionSpace:
    """Every valid state and full configuration of a catalogue, with reachability."""

    def __init__(self, catalog: Catalog):
        t0 = time.perf_counter()
        self.catalog = catalog
        self.profiles = catalog.profiles
        self.profile_pos = {p.name: i for i, p in enumerate(self.profiles)}
        self.slots: list[_Slot] = []
        self.slot_of: dict[tuple[str, int], _Slot] = {}
        self.slots_by_profile: list[list[_Slot]] = []
        for pi, prof in enumerate(self.profiles):
            row = []
            for start in prof.placement_starts:
                mask = ((1 << prof.memory_slices) - 1) << start
                slot = _Slot(len(self.slots), pi, start, mask)
                self.slots.append(slot)
                self.slot_of[(prof.name, start)] = slot
                row.append(slot)
            self.slots_by_profile.append(row)
        self.full_mem_mask = (1 << catalog.memory_slices) - 1
        self.full_configs: list[int] = []
        self._enumerate()
        self.full_configs_set = frozenset(self.full_configs)
        self.reach: dict[int, int] = {}
        # per state, per profile: sum over reachable full configs of that profile's free count
        self.profile_reach: dict[int, list[int]] = {}
        # per state, per profile: most free instances of that profile in one reachable config
        self.profile_max: dict[int, list[int]] = {}
        self._precompute_reach()
        self.precompute_seconds = time.perf_counter() - t0
        log.debug(
            "%s: %d placements, %d valid states, %d full configurations, precomputed in %.3fs",
            catalog.model, len(self.slots), len(self.reach), len(self.full_configs),
            self.precompute_seconds,
        )

    # -- precomputation (Algorithm 2) -------------------------------------------------
    def _can_add(self, slot: _Slot, mem: int, compute: int, counts: list[int], media: int) -> bool:
        prof = self.profiles[slot.profile_index]
        return (
            not (mem & slot.mem_mask)
            and compute + prof.compute_slices <= self.catalog.compute_slices
            and counts[slot.profile_index] < prof.max_instances
            and (not prof.media_extensions or media < self.catalog.media_extension_instances)
        )

    def _enumerate(self) -> None:
        """Find the full configurations: states to which no placement can be added."""
        slots = self.slots
        counts = [0] * len(self.profiles)
        full = self.full_configs

        def dfs(first: int, mask: int, mem: int, compute: int, media: int) -> None:
            for slot in slots[first:]:
                if self._can_add(slot, mem, compute, counts, media):
                    prof = self.profiles[slot.profile_index]
                    counts[slot.profile_index] += 1
                    dfs(slot.pid + 1, mask | (1 << slot.pid), mem | slot.mem_mask,
                        compute + prof.compute_slices, media + prof.media_extensions)
                    counts[slot.profile_index] -= 1
            # maximal: nothing at all (also slots before `first`) can be added
            if not any(self._can_add(s, mem, compute, counts, media) for s in slots):
                full.append(mask)

        dfs(0, 0, 0, 0, 0)
        # a maximal state reached through different orders is still found once, since DFS
        # adds slots in increasing pid order
        self.full_configs = sorted(set(full))

    def _precompute_reach(self) -> None:
        reach = self.reach
        preach = self.profile_reach
        pmax = self.profile_max
        nprof = len(self.profiles)
        for full in self.full_configs:
            bits = [b for b in range(len(self.slots)) if full >> b & 1]
            profs = [self.slots[b].profile_index for b in bits]
            n = len(bits)
            for sub in range(1 << n):
                mask = 0
                free_counts = [0] * nprof
                for i in range(n):
                    if sub >> i & 1:
                        mask |= 1 << bits[i]
                    else:
                        free_counts[profs[i]] += 1
                reach[mask] = reach.get(mask, 0) + 1
                row = preach.get(mask)
                if row is None:
                    preach[mask] = free_counts
                    pmax[mask] = list(free_counts)
                else:
                    top = pmax[mask]
                    for i, c in enumerate(free_counts):
                        if c:
                            row[i] += c
                            if c > top[i]:
                                top[i] = c

    # -- queries --------------------------------------------------------------------
    @property
    def n_states(self) -> int:
        return len(self.reach)

    def is_valid(self, mask: int) -> bool:
        return mask in self.reach

    def placements_of(self, mask: int) -> tuple[Placement, ...]:
        out = []
        for slot in self.slots:
            if mask >> slot.pid & 1:
                out.append(Placement(self.profiles[slot.profile_index].name, slot.start))
        return tuple(sorted(out, key=lambda p: (p.start, p.profile)))

    def mem_mask_of(self, mask: int) -> int:
        mem = 0
        for slot in self.slots:
            if mask >> slot.pid & 1:
                mem |= slot.mem_mask
        return mem

    def slot(self, profile: str, start: int) -> _Slot:
        if profile not in self.profile_pos:
            raise UnknownProfileError(
                f"profile {profile!r} is not in the {self.catalog.model} catalogue"
                f"; choose one of "
                f"{', '.join(self.catalog.profile_names)}"
            )
        slot = self.slot_of.get((profile, start))
        if slot is None:
            starts = self.profiles[self.profile_pos[profile]].placement_starts
            raise InvalidPlacementError(
                f"{self.catalog.model}: {profile} cannot start at memory slice {start}; "
                f"valid starts are {{{','.join(map(str, starts))}}}"
            )
        return slot

    def full_configurations(self) -> list[tuple[Placement, ...]]:
        return [self.placements_of(m) for m in self.full_configs]

    def empty(self) -> "PartitionState":
        return PartitionState(self, 0)


@lru_cache(maxsize=64)
def get_space(catalog: Catalog, profiles: tuple[str, ...] | None = None) -> PartitionSpace:
    """The precomputed space of ``catalog`` restricted to ``profiles`` (cached)."""
    return PartitionSpace(catalog.restrict(profiles))


class PartitionState:
    """An immutable partition state of one GPU. ``alloc``/``free`` return new states."""

    __slots__ = ("space", "mask", "mem_mask")

    def __init__(self, space: PartitionSpace, mask: int = 0, mem_mask: int | None = None):
        self.space = space
        self.mask = mask
        self.mem_mask = space.mem_mask_of(mask) if mem_mask is None else mem_mask

    # construction ------------------------------------------------------------------
    @classmethod
    def from_placements(cls, space: PartitionSpace,
                        placements: Iterable[Placement | tuple[str, int]]) -> "PartitionState":
        state = cls(space, 0, 0)
        for p in placements:
            prof, start = (p.profile, p.start) if isinstance(p, Placement) else p
            state = state.alloc(prof, start)
        return state

    @classmethod
    def parse(cls, space: PartitionSpace, text: str | None) -> "PartitionState":
        """Parse ``"3g.40gb@4,1g.10gb@0"`` (empty or None: the empty state)."""
        return cls.from_placements(space, parse_placements(text))

    # queries -----------------------------------------------------------------------
    @property
    def placements(self) -> tuple[Placement, ...]:
        return self.space.placements_of(self.mask)

    @property
    def reachable_full_configs(self) -> int:
        return self.space.reach.get(self.mask, 0)

    @property
    def is_full(self) -> bool:
        return self.mask in self.space.full_configs_set

    @property
    def free_memory_slices(self) -> int:
        return self.space.catalog.memory_slices - bin(self.mem_mask).count("1")

    def __contains__(self, item: Placement | tuple[str, int]) -> bool:
        prof, start = (item.profile, item.start) if isinstance(item, Placement) else item
        slot = self.space.slot_of.get((prof, start))
        return slot is not None and bool(self.mask >> slot.pid & 1)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PartitionState) and other.space is self.space
                and other.mask == self.mask)

    def __hash__(self) -> int:
        return hash((id(self.space), self.mask))

    def __repr__(self) -> str:
        inside = ",".join(str(p) for p in self.placements) or "empty"
        return f"PartitionState({self.space.catalog.model}: {inside})"

    def successors(self, profile: str) -> list[tuple[int, "PartitionState"]]:
        """Every (start, next state) that allocating ``profile`` can reach, by start."""
        space = self.space
        if profile not in space.profile_pos:
            space.slot(profile, -1)  # raises UnknownProfileError
        out = []
        for slot in space.slots_by_profile[space.profile_pos[profile]]:
            if self.mem_mask & slot.mem_mask or self.mask >> slot.pid & 1:
                continue
            nxt = self.mask | (1 << slot.pid)
            if nxt in space.reach:
                out.append((slot.start, PartitionState(space, nxt, self.mem_mask | slot.mem_mask)))
        return out

    def can_alloc(self, profile: str, start: int) -> bool:
        slot = self.space.slot_of.get((profile, start))
        return slot is not None and (self.mask | (1 << slot.pid)) in self.space.reach and not (
            self.mem_mask & slot.mem_mask)

    # transitions -------------------------------------------------------------------
    def alloc(self, profile: str, start: int) -> "PartitionState":
        space = self.space
        slot = space.slot(profile, start)
        if self.mem_mask & slot.mem_mask:
            clash = [str(p) for p in self.placements
                     if space.slot_of[(p.profile, p.start)].mem_mask & slot.mem_mask]
            raise PlacementOccupiedError(
                f"{space.catalog.model}: {profile}@{start} overlaps {', '.join(clash)}; "
                f"free those instances first or choose another start"
            )
        nxt = self.mask | (1 << slot.pid)
        if nxt not in space.reach:
            raise PlacementOccupiedError(
                f"{space.catalog.model}: {profile}@{start} beside "
                f"{','.join(map(str, self.placements)) or 'nothing'} exceeds the GPU's compute "
                f"slices or the instance limit of {profile}; free an instance first"
            )
        return PartitionState(space, nxt, self.mem_mask | slot.mem_mask)

    def free(self, profile: str, start: int) -> "PartitionState":
        space = self.space
        slot = space.slot(profile, start)
        if not self.mask >> slot.pid & 1:
            raise InvalidPlacementError(
                f"{space.catalog.model}: no {profile} instance at {start} to free; "
                f"the state holds {','.join(map(str, self.placements)) or 'nothing'}"
            )
        return PartitionState(space, self.mask & ~(1 << slot.pid), self.mem_mask & ~slot.mem_mask)


def parse_placements(text: str | None) -> list[Placement]:
    """Parse ``"3g.40gb@4,1g.10gb@0"`` into placements."""
    out: list[Placement] = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        prof, sep, start = part.rpartition("@")
        if not sep or not prof or not start.strip().isdigit():
            raise ValueError(f"cannot read placement {part!r}: write PROFILE@START, e.g. 3g.40gb@4")
        out.append(Placement(prof.strip(), int(start)))
    return out

