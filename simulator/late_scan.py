"""Which GPUs of a kind are released after the head's reservation: one scan per kind while
nothing is started, stopped or re-rated.

The backfill tests of the packing policies walk the GPUs of one kind (``ShareIndex`` groups)
for the first one whose release (``ReleaseIndex.of``: its last job's expected end) comes
after the head's reservation ``shadow``, or, for colocate, one the newcomer leaves free in
time. A pass tries up to ``bf_depth`` jobs against the same kinds, so :class:`LateScan`
keeps, per kind, the first GPU released after ``shadow`` and the earliest release of the
kind, until the release index or the share index changes (``ReleaseIndex.stamp``,
``ShareIndex.changes``: every start, end, stop and change of speed moves one) or the shadow
does. The answers are those of the walk it replaces (the same GPU, in the group's order).
"""
from __future__ import annotations

import logging

from simulator.releases import ReleaseIndex
from simulator.sharing import ShareIndex

log = logging.getLogger(__name__)


class LateScan:
    """Per kind of GPU: the first GPU released after a shadow, and the earliest release."""

    def __init__(self, releases: ReleaseIndex, shares: ShareIndex):
        self.releases, self.shares = releases, shares
        self._state: tuple[int, int] = (-1, -1)
        self._first: dict[tuple, tuple[float, int | None]] = {}
        self._earliest: dict[tuple, float] = {}
        self.scans = self.hits = 0

    def _fresh(self) -> None:
        state = (self.releases.stamp, self.shares.changes)
        if state != self._state:  # something started, ended or changed speed: all stale
            self._state = state
            self._first.clear()
            self._earliest.clear()

    def first_late(self, key: tuple, gids: dict[int, None], shadow: float) -> int | None:
        """The first of ``gids`` (kind ``key``) released after ``shadow`` (None: none); the
        walk stops there, as the one it replaces did."""
        self._fresh()
        hit = self._first.get(key)
        if hit is not None and hit[0] == shadow:
            self.hits += 1
            return hit[1]
        self.scans += 1
        of = self.releases.of
        first = next((gid for gid in gids if of[gid] > shadow), None)
        self._first[key] = (shadow, first)
        return first

    def earliest(self, key: tuple, gids: dict[int, None]) -> float:
        """The earliest release among ``gids`` (kind ``key``)."""
        self._fresh()
        lo = self._earliest.get(key)
        if lo is None:
            of = self.releases.of
            lo = self._earliest[key] = min(of[gid] for gid in gids)
        return lo

    def late(self, key: tuple, gids: dict[int, None], shadow: float) -> tuple[int | None, float]:
        """(:meth:`first_late`, :meth:`earliest`)."""
        return self.first_late(key, gids, shadow), self.earliest(key, gids)
