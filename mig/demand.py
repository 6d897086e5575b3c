"""Demand-aware value of a partition state: how many more requests of the node's size mix
it is expected to accept.

A node sees a mix of instance sizes (its queue and its history). The MIG thesis' state machine
counts the full configurations a state can still reach, each worth one whatever its sizes;
a node that mostly gets ``1g.10gb`` and ``3g.40gb`` cares only for the configurations made of
those. Here each state is worth the expected number of requests drawn from the mix ``w``
that it accepts, one after the other, each placed where that expectation is highest, until
one does not fit:

    N(s) = sum_p w_p * max over the successors s' of s by p of (1 + N(s'))   (0: none fits)

so a configuration counts in proportion to how likely the mix is to fill it, and a
placement that keeps room for the common sizes (a ``3g.40gb`` region beside the small
ones) is preferred to one that only keeps many configurations of sizes nobody asks for.
Departures are not modelled (the state only fills up); ties go to the thesis' count.

``N`` is computed for every state at once, layer by layer from the full configurations
down (states are a DAG under alloc), with numpy (about a millisecond). A node's mix changes
slowly, so a table is kept while the mix stays within ``DRIFT`` (L1 distance of the shares)
of the mix it was built for, and tables are cached per mix rounded to ``1 / GRID``: the
decision itself is a few look-ups.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Mapping

import numpy as np

from mig.fsm import PartitionSpace, PartitionState

GRID = 50  # mix weights are rounded to 1/GRID for the cache
CACHE = 256  # mixes kept per space
DRIFT = 0.1  # a table serves mixes this close to its own (L1 distance of the shares)


class DemandValue:
    """The table ``N`` above for one partition space, per size mix."""

    def __init__(self, space: PartitionSpace):
        self.space = space
        masks = sorted(space.reach, key=lambda m: -bin(m).count("1"))
        self.index = {m: i for i, m in enumerate(masks)}
        n_prof = len(space.profiles)
        width = max((len(r) for r in space.slots_by_profile), default=1)
        s = len(masks)
        succ = np.full((s, n_prof, max(1, width)), s, dtype=np.int64)  # s: "does not fit"
        for m in masks:
            st = PartitionState(space, m)
            for pi, prof in enumerate(space.profiles):
                for k, (_, nxt) in enumerate(st.successors(prof.name)):
                    succ[self.index[m], pi, k] = self.index[nxt.mask]
        self._succ = succ
        self._fits = succ < s
        counts = np.array([bin(m).count("1") for m in masks])
        self._layers = [np.flatnonzero(counts == c) for c in sorted(set(counts), reverse=True)]
        self._cache: OrderedDict[tuple[int, ...], np.ndarray] = OrderedDict()
        self._last: tuple[list[float], np.ndarray] | None = None  # (shares, table) in use

    def shares(self, demand: Mapping[str, float]) -> list[float]:
        """The mix as shares of the space's profiles, in order (all 0: no demand)."""
        pos = self.space.profile_pos
        w = [0.0] * len(self.space.profiles)
        for name, x in demand.items():
            i = pos.get(name)
            if i is not None and x > 0:
                w[i] += float(x)
        total = sum(w)
        return [x / total for x in w] if total > 0 else w

    def key(self, demand: Mapping[str, float]) -> tuple[int, ...]:
        """The mix as integer weights on the grid (profiles of the space, in order)."""
        return tuple(int(round(GRID * x)) for x in self.shares(demand))

    def table_for(self, demand: Mapping[str, float]) -> np.ndarray:
        """The table of the mix in use while ``demand`` stays within ``DRIFT`` of it, else
        the (cached or built) table of ``demand``."""
        w = self.shares(demand)
        last = self._last
        if last is not None and sum(abs(a - b) for a, b in zip(w, last[0])) <= DRIFT:
            return last[1]
        table = self.table(tuple(int(round(GRID * x)) for x in w))
        self._last = (w, table)
        return table

    def table(self, key: tuple[int, ...]) -> np.ndarray:
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        w = np.array(key, dtype=float)
        w = w / w.sum() if w.sum() > 0 else w
        n = np.zeros(len(self.index) + 1)  # the last entry: "does not fit"
        for layer in self._layers:
            sub = self._succ[layer]
            best = np.where(self._fits[layer], 1.0 + n[sub], 0.0).max(axis=2)
            n[layer] = best @ w
        self._cache[key] = n
        if len(self._cache) > CACHE:
            self._cache.popitem(last=False)
        return n

    def value(self, state: PartitionState, demand: Mapping[str, float]) -> float:
        return float(self.table(self.key(demand))[self.index[state.mask]])


_VALUES: dict[int, DemandValue] = {}


def demand_value(space: PartitionSpace) -> DemandValue:
    """The (cached) :class:`DemandValue` of ``space``."""
    hit = _VALUES.get(id(space))
    if hit is None or hit.space is not space:
        hit = _VALUES[id(space)] = DemandValue(space)
    return hit
