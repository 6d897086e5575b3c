"""Shares per GPU and the ladder of share counts a packed job may hold, per GPU model, so
that every combination of shares Slurm can give is placeable as MIG instances. Pure.

Slurm counts shards per GPU and nothing else: it gives any requests whose sum fits the
GPU's count, in any order of arrivals and departures. A MIG GPU is not a count: profiles
have placements, a limit per profile, and the GPU a limit of compute slices. With 8 shares
on an H100 and any 1-7 shards (one shard per memory slice), 8 x 1 fails on the 8th (7
instances at most), 3 + 5 has no placement, and departures fragment the GPU (four quarters,
two leave, a half fits the free count but no free half exists).

A ladder is ``shares_per_gpu`` (S) and the share counts (rungs) the packer may ask for;
rung k is the smallest profile holding k memory slices (the whole GPU for k = S). It is
*safe* when every request Slurm would admit (used + k <= S) is placed by the agent's
placement policy in every state reachable by any sequence of admitted arrivals and of
departures: :func:`counterexample` checks that exhaustively (the reachable partition
states of one GPU are a few hundred) and gives the sequence that breaks it otherwise.
:func:`ladder_for` chooses, per model, the safe ladder with the most rungs (ties: more
shares). On an H100: 5 shares of one memory slice (10 GB), rungs 1, 2, 4 and 5
(1g.10gb, 1g.20gb, 3g.40gb, the whole GPU). A request between rungs is rounded up.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import lru_cache

from mig.catalog import Catalog, Profile, load_catalog
from mig.fsm import PartitionState, get_space
from mig.policies import choose

Event = tuple[str, object]  # ("arrive", shares) | ("leave", "profile@start")


class LadderError(ValueError):
    """No ladder of this shape exists on the model; the message says why."""


@dataclass(frozen=True)
class ShareLadder:
    """The shares of one GPU model and the share counts (rungs) a packed job may hold."""

    model: str
    shares_per_gpu: int
    rungs: tuple[int, ...]  # ascending, from 1 to shares_per_gpu
    profiles: tuple[str, ...]  # the MIG profile of each rung
    memory_mib: tuple[int, ...] = field(default=(), compare=False)  # each rung's profile memory

    def round_up(self, shares: int) -> int:
        """The rung that holds ``shares``."""
        if not 1 <= shares <= self.shares_per_gpu:
            raise ValueError(f"{shares} shares is outside 1..{self.shares_per_gpu} on {self.model}")
        return next(k for k in self.rungs if k >= shares)

    @property
    def share_bytes(self) -> float:
        """Memory per share: every rung k below the whole GPU holds at least k times this
        (its profile's memory), so sizing by it and rounding up never gives too little."""
        pairs = [(k, m) for k, m in zip(self.rungs, self.memory_mib) if k < self.shares_per_gpu] \
            or list(zip(self.rungs, self.memory_mib))
        return min(m * 1024 * 1024 / k for k, m in pairs)

    def profile_for(self, shares: int) -> str:
        """The MIG profile of the rung that holds ``shares``."""
        return self.profiles[self.rungs.index(self.round_up(shares))]


def _non_media(catalog: Catalog) -> list[Profile]:
    return [p for p in catalog.profiles if not p.media_extensions]


def ladder_with(catalog: Catalog, shares: int, rungs: tuple[int, ...]) -> ShareLadder:
    """The ladder of ``shares`` per GPU with these rungs (1 and ``shares`` are added)."""
    if shares < 1:
        raise LadderError(f"shares per GPU must be at least 1, not {shares}")
    ks = tuple(sorted({1, shares, *rungs}))
    if ks[-1] > shares:
        raise LadderError(f"rungs {ks} exceed {shares} shares")
    full = max(_non_media(catalog), key=lambda p: (p.memory_slices, p.compute_slices))
    names: list[str] = []
    for k in ks:
        fits = [p for p in _non_media(catalog) if p.memory_slices >= k]
        if k == shares:
            names.append(full.name)
        elif fits:
            names.append(min(fits, key=lambda p: (p.memory_slices, p.compute_slices, p.memory_mib)).name)
        else:
            raise LadderError(f"no {catalog.model} profile holds {k} memory slices")
    if len(set(names)) != len(names):
        raise LadderError(f"rungs {ks} of {catalog.model} share profiles {names}: keep the larger rung")
    mib = tuple(catalog.profile(n).memory_mib for n in names)
    return ShareLadder(catalog.model, shares, ks, tuple(names), mib)


def counterexample(catalog: Catalog, ladder: ShareLadder, policy: str = "fsm") -> tuple[Event, ...] | None:
    """A sequence of admitted arrivals and departures after which an admitted request cannot
    be placed by ``policy``; None when there is none (every state reachable is searched)."""
    shares_of = dict(zip(ladder.profiles, ladder.rungs))
    start = get_space(catalog).empty()
    seen = {start.mask}
    todo: list[tuple[PartitionState, tuple[Event, ...]]] = [(start, ())]
    while todo:
        state, path = todo.pop()
        used = sum(shares_of[p.profile] for p in state.placements)
        nexts: list[tuple[PartitionState, Event]] = []
        for k, profile in zip(ladder.rungs, ladder.profiles):
            if used + k > ladder.shares_per_gpu:
                continue  # Slurm would not admit it on this GPU
            at = choose(state, profile, policy).start
            if at is None:
                return (*path, ("arrive", k))
            nexts.append((state.alloc(profile, at), ("arrive", k)))
        nexts += [(state.free(p.profile, p.start), ("leave", str(p))) for p in state.placements]
        for nxt, event in nexts:
            if nxt.mask not in seen:
                seen.add(nxt.mask)
                todo.append((nxt, (*path, event)))
    return None


@lru_cache(maxsize=64)
def ladder_for(catalog: Catalog, shares: int | None = None, policy: str = "fsm") -> ShareLadder:
    """The safe ladder of ``catalog``'s model with the most rungs (ties: more shares), or
    with exactly ``shares`` per GPU when given."""
    counts = [shares] if shares is not None else range(2, catalog.memory_slices + 1)
    best: ShareLadder | None = None
    for s in counts:
        middle = range(2, s)
        for r in range(len(middle), -1, -1):
            found = None
            for mid in itertools.combinations(middle, r):
                try:
                    ladder = ladder_with(catalog, s, mid)
                except LadderError:
                    continue
                if counterexample(catalog, ladder, policy) is None:
                    found = ladder
                    break
            if found is not None:
                if best is None or (len(found.rungs), found.shares_per_gpu) > (len(best.rungs), best.shares_per_gpu):
                    best = found
                break
    if best is None:
        raise LadderError(f"no ladder of {shares} shares is safe on {catalog.model}")
    return best


def model_ladder(model: str, shares: int | None = None) -> ShareLadder:
    """The safe ladder of a catalogued ``model`` (a name or alias), with ``shares`` per GPU
    when given. Raises LadderError naming the model's own share count when ``shares`` has none,
    and mig's UnknownGpuModelError for a model with no catalogue."""
    catalog = load_catalog(model)
    try:
        return ladder_for(catalog, shares)
    except LadderError:
        own = ladder_for(catalog)
        raise LadderError(f"{shares} shares per GPU cannot always be placed as {catalog.model} MIG instances "
                          f"(some combination Slurm may give has no placement); use {own.shares_per_gpu} "
                          f"(share counts {', '.join(map(str, own.rungs))})") from None
