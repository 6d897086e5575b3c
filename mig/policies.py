"""Placement policies: where a new GPU instance of a profile goes in a partition state.

- ``fsm``: the successor state that keeps the most full configurations reachable
  (MIG thesis, Algorithm 3); ties go to the lowest start.
- ``demand``: successor states scored by the node's size mix (its queue and its history):
  the expected number of further requests of that mix the state accepts, each placed at
  its best, before one does not fit (:mod:`mig.demand`); ties fall back to ``fsm``.
- ``first-fit``: the lowest free start.
- ``random``: a uniformly random feasible start (seeded ``random.Random`` for replays).
"""
from __future__ import annotations

import random as _random
from dataclasses import dataclass
from typing import Mapping

from mig.demand import demand_value
from mig.fsm import PartitionState

POLICIES = ("fsm", "first-fit", "random", "demand")


@dataclass(frozen=True)
class Candidate:
    """One feasible start for a request, with the score of the state it leads to."""

    start: int
    reachable_full_configs: int
    demand_score: tuple[float, float] = (0.0, 0.0)

    def to_dict(self) -> dict:
        return {"start": self.start, "reachable_full_configs": self.reachable_full_configs}


@dataclass(frozen=True)
class Choice:
    """What a policy chose for ``profile``: ``start`` is None when nothing fits."""

    profile: str
    start: int | None
    reachable_full_configs: int
    alternatives: tuple[Candidate, ...]
    policy: str

    def to_dict(self) -> dict:
        return {
            "profile": self.profile,
            "start": self.start,
            "reachable_full_configs": self.reachable_full_configs,
            "alternatives": [a.to_dict() for a in self.alternatives],
        }


def demand_score(nxt: PartitionState, demand: Mapping[str, float]) -> tuple[float, float]:
    """How well ``nxt`` can still serve the pending mix ``demand`` (profile -> weight).

    First: Σ_p w_p × the most free instances of p one reachable full configuration offers
    (how many of each pending kind can still be placed). Then, to break ties: Σ_p w_p × the
    free instances of p summed over every reachable full configuration.
    """
    space = nxt.space
    top = space.profile_max.get(nxt.mask)
    row = space.profile_reach.get(nxt.mask)
    if top is None or row is None:
        return (0.0, 0.0)
    total = float(sum(w for w in demand.values() if w > 0)) or 1.0
    best = summed = 0.0
    for name, w in demand.items():
        pos = space.profile_pos.get(name)
        if pos is not None and w > 0:
            best += (w / total) * top[pos]
            summed += (w / total) * row[pos]
    return (best, summed)


def candidates(state: PartitionState, profile: str,
               demand: Mapping[str, float] | None = None) -> list[Candidate]:
    """Every feasible start for ``profile`` in ``state``, in start order; with ``demand``,
    each scored by the expected requests of that mix its state still accepts."""
    succ = state.successors(profile)
    if not demand:
        return [Candidate(start, nxt.reachable_full_configs) for start, nxt in succ]
    dv = demand_value(state.space)
    table = dv.table_for(demand)
    index = dv.index
    return [Candidate(start, nxt.reachable_full_configs, (float(table[index[nxt.mask]]), 0.0))
            for start, nxt in succ]


def choose(state: PartitionState, profile: str, policy: str = "fsm",
           demand: Mapping[str, float] | None = None,
           rng: _random.Random | None = None) -> Choice:
    """Rank the feasible starts of ``profile`` and pick one by ``policy``."""
    if policy not in POLICIES:
        raise ValueError(f"unknown placement policy {policy!r}; choose one of {', '.join(POLICIES)}")
    cands = candidates(state, profile, demand if policy == "demand" else None)
    if not cands:
        return Choice(profile, None, 0, (), policy)
    if policy == "first-fit":
        best = cands[0]
    elif policy == "random":
        best = (rng or _random).choice(cands)
    elif policy == "demand" and demand:
        best = max(cands, key=lambda c: (c.demand_score, c.reachable_full_configs, -c.start))
    else:
        best = max(cands, key=lambda c: (c.reachable_full_configs, -c.start))
    return Choice(profile, best.start, best.reachable_full_configs, tuple(cands), policy)


def choose_placement(state: PartitionState, profile: str, policy: str = "fsm",
                     demand: Mapping[str, float] | None = None,
                     rng: _random.Random | None = None) -> int | None:
    """The start chosen for ``profile`` (None when it does not fit anywhere)."""
    return choose(state, profile, policy, demand, rng).start
