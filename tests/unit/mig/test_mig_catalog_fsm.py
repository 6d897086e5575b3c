"""Catalogues and the partition state machine."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mig.catalog import list_models, load_catalog
from mig.errors import InvalidPlacementError, PlacementOccupiedError, UnknownGpuModelError, UnknownProfileError
from mig.fsm import PartitionState, Placement, get_space, parse_placements

ALL_MODELS = ["A100-SXM4-40GB", "A100-80GB", "A30-24GB", "H100-80GB", "H100-NVL-94GB",
              "H200-141GB", "GH200-96GB"]


def test_every_supported_model_has_a_catalogue():
    assert set(ALL_MODELS) <= set(list_models())


@pytest.mark.parametrize("model", ALL_MODELS)
def test_catalogue_is_consistent_and_cites_its_source(model):
    cat = load_catalog(model)
    assert "docs.nvidia.com" in cat.source and "NVML" in cat.source
    assert len({p.profile_id for p in cat.profiles}) == len(cat.profiles)
    for p in cat.profiles:
        assert p.placement_starts, p.name
        assert all(s + p.memory_slices <= cat.memory_slices for s in p.placement_starts)
        assert p.compute_slices <= cat.compute_slices
        assert p.name.startswith(f"{p.compute_slices}g.")


def test_h100_placements_match_nvml():
    cat = load_catalog("H100-80GB")
    got = {p.name: (p.placement_starts, p.memory_slices) for p in cat.profiles}
    assert got == {
        "1g.10gb": ((0, 1, 2, 3, 4, 5, 6), 1),
        "1g.10gb+me": ((0, 1, 2, 3, 4, 5, 6), 1),
        "1g.20gb": ((0, 2, 4, 6), 2),
        "2g.20gb": ((0, 2, 4), 2),
        "3g.40gb": ((0, 4), 4),
        "4g.40gb": ((0,), 4),
        "7g.80gb": ((0,), 8),
    }


def test_model_aliases_and_unknown_model():
    assert load_catalog("NVIDIA H100 80GB HBM3").model == "H100-80GB"
    assert load_catalog("nvidia a100-sxm4-40gb").model == "A100-SXM4-40GB"
    with pytest.raises(UnknownGpuModelError, match="known models"):
        load_catalog("V100")


def test_a100_classic_five_profiles_have_19_full_configurations():
    space = get_space(load_catalog("A100-SXM4-40GB"),
                      ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"))
    assert len(space.full_configs) == 19


def test_a30_without_media_extensions_has_5_full_configurations():
    space = get_space(load_catalog("A30-24GB"), ("1g.6gb", "2g.12gb", "4g.24gb"))
    assert len(space.full_configs) == 5


def test_precompute_is_cached_per_catalogue_and_subset():
    cat = load_catalog("H100-80GB")
    assert get_space(cat) is get_space(cat)
    assert get_space(cat, ("1g.10gb",)) is not get_space(cat)


def test_whole_h100_precompute_under_a_second():
    from mig.fsm import PartitionSpace

    assert PartitionSpace(load_catalog("H100-80GB")).precompute_seconds < 1.0


def test_thesis_example_small_instance_prefers_the_last_slice():
    space = get_space(load_catalog("A100-SXM4-40GB"),
                      ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"))
    reach = {s: nxt.reachable_full_configs for s, nxt in space.empty().successors("1g.5gb")}
    assert max(reach, key=lambda s: (reach[s], -s)) == 6
    assert reach[6] > reach[0]
    assert space.empty().reachable_full_configs == 19


def test_alloc_refuses_overlap_bad_start_and_limits():
    space = get_space(load_catalog("H100-80GB"))
    s = space.empty().alloc("3g.40gb", 4)
    with pytest.raises(PlacementOccupiedError, match="overlaps 3g.40gb@4"):
        s.alloc("1g.10gb", 5)
    with pytest.raises(InvalidPlacementError, match="valid starts are"):
        s.alloc("2g.20gb", 1)
    with pytest.raises(UnknownProfileError):
        s.alloc("5g.50gb", 0)
    s = space.empty().alloc("1g.10gb+me", 0)
    with pytest.raises(PlacementOccupiedError, match="instance limit"):
        s.alloc("1g.10gb+me", 1)
    with pytest.raises(InvalidPlacementError, match="no 1g.10gb instance at 3"):
        s.free("1g.10gb", 3)


def test_parse_and_render_placements():
    space = get_space(load_catalog("H100-80GB"))
    s = PartitionState.parse(space, "3g.40gb@4, 1g.10gb@0")
    assert s.placements == (Placement("1g.10gb", 0), Placement("3g.40gb", 4))
    assert Placement("3g.40gb", 4) in s and ("1g.10gb", 1) not in s
    assert s.free_memory_slices == 3
    with pytest.raises(ValueError, match="PROFILE@START"):
        parse_placements("3g.40gb")


def test_every_full_configuration_is_maximal_and_valid():
    space = get_space(load_catalog("H100-80GB"))
    for cfg in space.full_configurations():
        state = PartitionState.from_placements(space, cfg)
        assert state.is_full and state.reachable_full_configs == 1
        for prof in space.catalog.profile_names:
            assert state.successors(prof) == []


# -- property tests -------------------------------------------------------------------------

_SPACES = {m: get_space(load_catalog(m)) for m in ("H100-80GB", "A30-24GB")}


@st.composite
def _ops(draw):
    model = draw(st.sampled_from(sorted(_SPACES)))
    space = _SPACES[model]
    names = list(space.catalog.profile_names)
    ops = draw(st.lists(st.tuples(st.booleans(), st.sampled_from(names), st.integers(0, 7)),
                        max_size=40))
    return space, ops


@settings(max_examples=150, deadline=None)
@given(_ops())
def test_no_sequence_of_allocs_and_frees_reaches_an_invalid_state(case):
    space, ops = case
    state = space.empty()
    for is_alloc, prof, start in ops:
        if is_alloc or not state.placements:
            try:
                nxt = state.alloc(prof, start)
            except (InvalidPlacementError, UnknownProfileError):
                continue
            # a free undoes its alloc
            assert nxt.free(prof, start) == state
            state = nxt
        else:
            victim = state.placements[start % len(state.placements)]
            nxt = state.free(victim.profile, victim.start)
            assert nxt.alloc(victim.profile, victim.start) == state
            state = nxt
        assert space.is_valid(state.mask)
        assert state.reachable_full_configs >= 1
        used = 0
        for p in state.placements:
            slot = space.slot(p.profile, p.start)
            assert not used & slot.mem_mask
            used |= slot.mem_mask
        assert used == state.mem_mask


@settings(max_examples=60, deadline=None)
@given(_ops())
def test_reachability_never_grows_along_an_alloc(case):
    space, ops = case
    state = space.empty()
    for _, prof, _ in ops:
        for _, nxt in state.successors(prof):
            assert 1 <= nxt.reachable_full_configs <= state.reachable_full_configs
        succ = state.successors(prof)
        if succ:
            state = succ[0][1]
