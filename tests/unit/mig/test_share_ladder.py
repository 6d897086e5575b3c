"""Shares that always fit: with each catalogued model's ladder, every sequence of arrivals and
departures Slurm can produce (any requests whose shares fit the GPU's count) is placed by the
agent's placement policy; the current scheme (a shard per memory slice, any 1-7) is not."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mig.catalog import list_models, load_catalog
from mig.fsm import get_space
from mig.policies import choose
from mig.share_ladder import ShareLadder, ladder_for, placeable
from slurm_plugin.agent.isolation import profile_for_shards

MODELS = list_models()
# an event: arrive with this many shares (rounded to a rung by the packer), or the i-th
# running job leaves
EVENTS = st.lists(st.one_of(st.tuples(st.just("arrive"), st.integers(1, 8)),
                            st.tuples(st.just("leave"), st.integers(0, 7))), max_size=40)


def replay(model: str, shares: int, profile_of, events, policy: str = "fsm") -> list[str]:
    """Slurm admits a request when its shares fit the GPU's free count; the agent places it.
    Returns the requests Slurm admitted that the agent could not place."""
    cat = load_catalog(model)
    state = get_space(cat).empty()
    running: list[tuple[int, str, int]] = []  # (shares, profile, start)
    failed = []
    for kind, n in events:
        if kind == "leave":
            if running:
                k, prof, start = running.pop(n % len(running))
                state = state.free(prof, start)
            continue
        k = min(n, shares)
        if sum(r[0] for r in running) + k > shares:
            continue  # Slurm would not give it here
        prof = profile_of(k)
        start = choose(state, prof, policy).start
        if start is None:
            failed.append(f"{k} shares ({prof}) beside {[r[0] for r in running]}")
            continue
        state = state.alloc(prof, start)
        running.append((k, prof, start))
    return failed


@pytest.mark.parametrize("model", MODELS)
def test_every_model_has_a_ladder_that_fits(model):
    cat = load_catalog(model)
    ladder = ladder_for(cat)
    assert placeable(cat, ladder) == [], ladder
    assert ladder.shares_per_gpu >= 2 and ladder.rungs == (1, ladder.shares_per_gpu)


@pytest.mark.parametrize("model", MODELS)
@given(events=EVENTS)
def test_any_arrivals_and_departures_are_placed(model, events):
    ladder = ladder_for(load_catalog(model))
    rung = [(kind, ladder.round_up(min(n, ladder.shares_per_gpu)) if kind == "arrive" else n)
            for kind, n in events]
    assert replay(model, ladder.shares_per_gpu, ladder.profile_for, rung) == []


def test_h100_ladder_is_seven_tenths():
    ladder = ladder_for(load_catalog("H100-80GB"))
    assert ladder == ShareLadder("H100-80GB", 7, "1g.10gb", "7g.80gb", ladder.unit_memory_mib)
    coarser = ladder_for(load_catalog("H100-80GB"), unit="1g.20gb")
    assert (coarser.shares_per_gpu, coarser.profile_for(1), coarser.round_up(3)) == (4, "1g.20gb", 4)


def test_the_current_scheme_fails_where_slurm_places():
    cat = load_catalog("H100-80GB")

    def today(k: int) -> str:
        return profile_for_shards(cat, k).name

    assert replay("H100-80GB", 8, today, [("arrive", 1)] * 8) == ["1 shares (1g.10gb) beside [1, 1, 1, 1, 1, 1, 1]"]
    assert replay("H100-80GB", 8, today, [("arrive", 3), ("arrive", 5)]) == ["5 shares (7g.80gb) beside [3]"]
    # fragmentation: four quarters, two leave, a half fits the count but not the GPU
    frag = [("arrive", 2)] * 4 + [("leave", 1), ("leave", 2), ("arrive", 4)]
    assert replay("H100-80GB", 8, today, frag) != []
