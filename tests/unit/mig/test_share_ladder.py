"""Shares that always fit: each catalogued model's ladder is placed by the agent's placement
policy after any sequence of admitted arrivals and departures (exhaustively, and by a
Hypothesis property test that replays random sequences); today's scheme (a shard per memory
slice, any 1-7 of 8) is not."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mig.catalog import list_models, load_catalog
from mig.fsm import get_space
from mig.policies import choose
from mig.share_ladder import LadderError, ShareLadder, counterexample, ladder_for, ladder_with

MODELS = list_models()
# an event: a job arrives asking for this many shares (the packer rounds it to a rung), or
# the i-th running job leaves
EVENTS = st.lists(st.one_of(st.tuples(st.just("arrive"), st.integers(1, 8)),
                            st.tuples(st.just("leave"), st.integers(0, 7))), max_size=40)


def replay(model: str, shares: int, profile_of, events) -> list[str]:
    """Slurm admits a request when it fits the GPU's free share count; the agent places it
    (the fsm policy). The admitted requests that could not be placed."""
    state = get_space(load_catalog(model)).empty()
    running: list[tuple[int, str, int]] = []
    failed = []
    for kind, n in events:
        if kind == "leave":
            if running:
                _, prof, start = running.pop(n % len(running))
                state = state.free(prof, start)
            continue
        if sum(r[0] for r in running) + n > shares:
            continue
        prof = profile_of(n)
        start = choose(state, prof).start
        if start is None:
            failed.append(f"{n} shares ({prof}) beside {[r[0] for r in running]}")
            continue
        state = state.alloc(prof, start)
        running.append((n, prof, start))
    return failed


@pytest.mark.parametrize("model", MODELS)
def test_every_model_has_a_safe_ladder(model):
    cat = load_catalog(model)
    ladder = ladder_for(cat)
    assert counterexample(cat, ladder) is None
    assert ladder.rungs[0] == 1 and ladder.rungs[-1] == ladder.shares_per_gpu >= 2


@pytest.mark.parametrize("model", MODELS)
@given(events=EVENTS)
def test_any_arrivals_and_departures_are_placed(model, events):
    ladder = ladder_for(load_catalog(model))
    rounded = [(kind, ladder.round_up(min(n, ladder.shares_per_gpu)) if kind == "arrive" else n)
               for kind, n in events]
    assert replay(model, ladder.shares_per_gpu, ladder.profile_for, rounded) == []


def test_h100_ladder():
    ladder = ladder_for(load_catalog("H100-80GB"))
    assert ladder == ShareLadder("H100-80GB", 5, (1, 2, 4, 5), ("1g.10gb", "1g.20gb", "3g.40gb", "7g.80gb"))
    assert [ladder.round_up(k) for k in (1, 2, 3, 4, 5)] == [1, 2, 4, 4, 5]
    seven = ladder_for(load_catalog("H100-80GB"), shares=7)  # more jobs per GPU, one size of slice
    assert seven.rungs == (1, 7)


def test_todays_scheme_fails_where_slurm_places():
    cat = load_catalog("H100-80GB")
    today = ShareLadder("H100-80GB", 8, tuple(range(1, 9)),
                        ("1g.10gb", "1g.20gb", "3g.40gb", "3g.40gb", "7g.80gb", "7g.80gb", "7g.80gb", "7g.80gb"))
    profile_of = dict(zip(today.rungs, today.profiles)).get
    assert replay("H100-80GB", 8, profile_of, [("arrive", 1)] * 8) == ["1 shares (1g.10gb) beside [1, 1, 1, 1, 1, 1, 1]"]
    assert replay("H100-80GB", 8, profile_of, [("arrive", 3), ("arrive", 5)]) == ["5 shares (7g.80gb) beside [3]"]
    frag = [("arrive", 2)] * 4 + [("leave", 1), ("leave", 2), ("arrive", 4)]
    assert replay("H100-80GB", 8, profile_of, frag) == ["4 shares (3g.40gb) beside [2, 2]"]
    with pytest.raises(LadderError, match="share profiles"):
        ladder_with(cat, 8, tuple(range(2, 8)))  # 3 and 4 shares would both be 3g.40gb
    assert counterexample(cat, ladder_with(cat, 8, (2, 4))) is not None  # 8 x 1g.10gb
    assert counterexample(cat, ladder_with(cat, 6, (2,))) is not None
