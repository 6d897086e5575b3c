"""How many jobs regrouping may move: per plan and per sliding hour.

Design note: US 10,884,795 (claim 2) bounds the jobs one plan may move by a user-set threshold;
moving jobs also costs their owners restarts, so the cluster-wide rate is bounded too. The
budget is a small object with an injected clock (`clock()` returns seconds, the
simulator's time or `time.time`), so it is pure: the same sequence of calls and times
gives the same answers. `record` is called only for moves actually made (enforce mode);
a shadow run asks `allows` without spending.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable


class MoveBudget:
    """At most `per_plan` moves in one plan and `per_hour` in any `window_s` seconds."""

    def __init__(self, per_plan: int = 2, per_hour: int = 6, clock: Callable[[], float] | None = None,
                 window_s: float = 3600.0):
        if per_plan < 0 or per_hour < 0:
            raise ValueError("move limits must be 0 or more (0 switches regrouping off)")
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        if clock is None:
            raise ValueError("MoveBudget needs a clock (e.g. time.time, or the simulator's now)")
        self.per_plan = per_plan
        self.per_hour = per_hour
        self.window_s = window_s
        self.clock = clock
        self._moves: deque[float] = deque()

    def _trim(self, now: float) -> None:
        while self._moves and self._moves[0] <= now - self.window_s:
            self._moves.popleft()

    def used(self) -> int:
        self._trim(self.clock())
        return len(self._moves)

    def remaining(self) -> int:
        """Moves a plan may make now: the per-plan bound and what is left of the hour."""
        return max(0, min(self.per_plan, self.per_hour - self.used()))

    def allows(self, moves: int) -> bool:
        return moves <= self.remaining()

    def record(self, moves: int) -> None:
        """Spend `moves` now. Raises when the budget does not allow them (a caller bug)."""
        if not self.allows(moves):
            raise ValueError(f"{moves} moves exceed the budget ({self.remaining()} left: "
                             f"{self.per_plan} per plan, {self.per_hour} per {self.window_s:.0f}s)")
        now = self.clock()
        self._moves.extend([now] * moves)

    def next_free_at(self) -> float | None:
        """When the hour window frees its oldest move (None when nothing is spent)."""
        self._trim(self.clock())
        return self._moves[0] + self.window_s if self._moves else None
