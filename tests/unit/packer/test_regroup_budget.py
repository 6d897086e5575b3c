"""The regrouping move budget: per plan, per sliding hour, injected clock."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packer.regroup_budget import MoveBudget


class Clock:
    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_per_plan_and_per_hour_bounds():
    clock = Clock()
    b = MoveBudget(per_plan=2, per_hour=3, clock=clock)
    assert b.remaining() == 2 and b.allows(2) and not b.allows(3)
    b.record(2)
    assert b.used() == 2 and b.remaining() == 1 and not b.allows(2)
    clock.t = 1800
    b.record(1)
    assert b.remaining() == 0 and b.next_free_at() == 3600
    with pytest.raises(ValueError, match="exceed the budget"):
        b.record(1)
    clock.t = 3600  # the first two moves leave the window
    assert b.used() == 1 and b.remaining() == 2
    clock.t = 5400
    assert b.used() == 0 and b.next_free_at() is None


def test_zero_switches_off_and_a_clock_is_required():
    assert MoveBudget(per_plan=0, per_hour=5, clock=Clock()).remaining() == 0
    with pytest.raises(ValueError, match="clock"):
        MoveBudget(2, 6)
    with pytest.raises(ValueError):
        MoveBudget(-1, 6, clock=Clock())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 2000), st.integers(0, 3)), max_size=30))
def test_never_more_than_per_hour_in_any_window(steps):
    clock = Clock()
    b = MoveBudget(per_plan=3, per_hour=5, clock=clock)
    made: list[float] = []
    for dt, n in steps:
        clock.t += dt
        if b.allows(n):
            b.record(n)
            made += [clock.t] * n
    for t in made:
        assert sum(1 for u in made if t - 3600 < u <= t) <= 5
