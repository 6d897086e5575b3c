"""MPS active-thread percentages (packer/mps.py)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from packer.mps import mps_percentages


def test_complementary_jobs_get_what_they_need_and_share_the_spare():
    out = mps_percentages({"a": 30.0, "b": 40.0}, headroom=0.0)
    assert sum(out.values()) == 100
    assert out["a"] >= 30 and out["b"] >= 40
    assert out["b"] - out["a"] == 10  # the spare (30) is split evenly


def test_jobs_that_do_not_fit_are_scaled_in_proportion():
    out = mps_percentages({"a": 90.0, "b": 45.0}, headroom=0.0, floor_pct=5)
    assert sum(out.values()) <= 100
    assert out["a"] > out["b"] >= 5


def test_unknown_utilisation_counts_as_a_fair_share():
    out = mps_percentages({"a": None, "b": None, "c": None})
    assert sum(out.values()) == 100 and max(out.values()) - min(out.values()) <= 1


def test_empty():
    assert mps_percentages({}) == {}


@given(st.dictionaries(st.integers(0, 50), st.one_of(st.none(), st.floats(0, 100)), min_size=1, max_size=12))
def test_sum_never_exceeds_100_and_each_job_gets_some(utils):
    out = mps_percentages(utils)
    assert set(out) == set(utils)
    assert sum(out.values()) <= 100
    assert all(v >= 1 for v in out.values())


def test_a_plan_is_kept_while_every_share_moves_less_than_the_threshold():
    from packer.mps import settled_plan

    old = {1: 72, 2: 28}
    assert settled_plan(old, {1: 71, 2: 29}, 5) == old
    assert settled_plan(old, {1: 76, 2: 24}, 5) == old


def test_a_plan_changes_when_a_share_moves_by_the_threshold_or_its_jobs_change():
    from packer.mps import settled_plan

    old = {1: 72, 2: 28}
    assert settled_plan(old, {1: 67, 2: 33}, 5) == {1: 67, 2: 33}
    assert settled_plan(old, {1: 50, 2: 25, 3: 25}, 5) == {1: 50, 2: 25, 3: 25}
    assert settled_plan(old, {1: 100}, 5) == {1: 100}
    assert settled_plan(None, {1: 60, 2: 40}, 5) == {1: 60, 2: 40}


def test_the_device_a_plan_names_is_the_gpu_or_the_mps_shared_mig_instance():
    from packer.mps import device_key, device_key_of

    assert device_key(0) == device_key_of(0, "mps:40") == "0"
    assert device_key(1, "3g.40gb@4") == device_key_of(1, "mps:33@3g.40gb@4") == "1@3g.40gb@4"
