"""When each busy GPU is released: the sorted index EASY backfill reads its reservation from."""
from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
import math

from simulator.state import Gpu


class ReleaseIndex:
    """(release time, GPU) of every busy GPU (its last job's expected end), kept sorted as
    jobs start, end and change speed, so a reservation is a look-up, not a scan. GPUs
    partitioned for good (mig-static) are never released and are not filed."""

    def __init__(self) -> None:
        self.sorted: list[tuple[float, int]] = []
        self.of: dict[int, float] = {}  # GPU -> its release time
        self.stamp = 0  # bumped at every re-filing (what LateScan's memo rests on)

    def touch(self, g: Gpu) -> None:
        """Re-file ``g`` (when its last job should end)."""
        self.stamp += 1
        old = self.of.pop(g.id, None)
        rel = self.sorted
        if old is not None:
            del rel[bisect_left(rel, (old, g.id))]
        if g.jobs and not g.static:
            r = max(j.t_end for j in g.jobs)
            self.of[g.id] = r
            insort(rel, (r, g.id))

    def end(self, gid: int) -> float:
        """When GPU ``gid`` is released (0 when it is not busy)."""
        return self.of.get(gid, 0.0)

    def shadow(self, k: int, free: int, need: int) -> tuple[float, int]:
        """When ``k`` more GPUs are released, and how many of ``free`` idle and those
        released by then are left over once ``need`` are taken."""
        releases = self.sorted
        if k > len(releases):
            return math.inf, 0
        shadow = releases[k - 1][0]
        extra = free + bisect_right(releases, (shadow, math.inf)) - need
        return shadow, max(0, extra)
