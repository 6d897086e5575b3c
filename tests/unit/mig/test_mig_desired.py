"""Desired MIG state (mig.desired) and the apply's guard of held instances (mig.apply), on the
simulated GPU: the record round-trips or is refused, a comparison says what differs."""
from __future__ import annotations

import pytest

from gpus.sim.backend import SimGpuBackend
from mig.apply import apply_layout, plan_apply
from mig.desired import DIFFERS, MATCH, UNKNOWN, GpuLayout, NodeDesired, after_changes, compare, verdict
from mig.errors import InUseError, PlacementOccupiedError
from mig.fsm import Placement, parse_placements
from tests.unit.mig.racing_gpu import RacingGpu


def P(text: str) -> tuple[Placement, ...]:
    return tuple(parse_placements(text))


def test_a_node_record_round_trips_with_sorted_placements():
    node = NodeDesired("n1", {0: GpuLayout(0, True, P("1g.10gb@6,3g.40gb@0"), "by-size", None),
                              1: GpuLayout(1, False)}, 12.5)
    back = NodeDesired.from_dict(node.to_dict())
    assert back == node
    assert node.to_dict()["gpus"][0]["placements"] == ["1g.10gb@6", "3g.40gb@0"]


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(version=2), "version"),
    (lambda d: d.update(node=""), "node"),
    (lambda d: d.update(gpus={}), "gpus must be a list"),
    (lambda d: d["gpus"][0].update(gpu_index=True), "gpu_index"),
    (lambda d: d["gpus"][0].update(gpu_index=-1), "gpu_index"),
    (lambda d: d["gpus"][0].update(mig_enabled="yes"), "mig_enabled"),
    (lambda d: d["gpus"][0].update(placements="1g.10gb@0"), "placements"),
    (lambda d: d["gpus"][0].update(placements=["1g.10gb"]), "PROFILE@START"),
    (lambda d: d["gpus"][0].update(mig_enabled=False), "MIG off cannot hold"),
    (lambda d: d["gpus"][0].update(error=3), "error"),
    (lambda d: d["gpus"].append(dict(d["gpus"][0])), "appears twice"),
    (lambda d: d.update(written_at="now"), "written_at"),
])
def test_a_record_that_cannot_be_read_is_refused_not_guessed(change, message):
    doc = NodeDesired("n1", {0: GpuLayout(0, True, P("1g.10gb@0"))}).to_dict()
    change(doc)
    with pytest.raises(ValueError, match=message):
        NodeDesired.from_dict(doc)


def test_compare_says_what_is_missing_extra_or_unknown_per_gpu():
    desired = NodeDesired("n1", {0: GpuLayout(0, True, P("3g.40gb@4,1g.10gb@0")),
                                 1: GpuLayout(1, True, P("7g.80gb@0")),
                                 2: GpuLayout(2, False)})
    same = {0: (True, P("1g.10gb@0,3g.40gb@4")), 1: (True, P("7g.80gb@0")), 2: (False, ())}
    assert verdict(compare(desired, same)) == MATCH
    changed = {**same, 0: (True, P("3g.40gb@4,1g.10gb@1")), 2: (True, ())}
    d0, d1, d2 = compare(desired, changed)
    assert (d0.missing, d0.extra, d0.verdict) == (P("1g.10gb@0"), P("1g.10gb@1"), DIFFERS)
    assert d1.match and d2.verdict == DIFFERS and "MIG off wanted, on now" in d2.describe()
    assert verdict([d0, d1, d2]) == DIFFERS
    unreadable = {**same, 1: "NVML: GPU is lost"}
    diffs = compare(desired, unreadable)
    assert verdict(diffs) == UNKNOWN and "GPU is lost" in diffs[1].describe()
    extra_gpu = {**same, 3: (True, ())}  # a GPU no layout was decided for
    assert verdict(compare(desired, extra_gpu)) == UNKNOWN
    assert verdict(compare(desired, {})) == UNKNOWN  # every GPU gone
    assert verdict([]) == UNKNOWN


def test_a_differing_gpu_names_its_last_failed_apply():
    desired = NodeDesired("n1", {0: GpuLayout(0, True, P("3g.40gb@4"), "queue", "create 3g.40gb@4 refused: busy")})
    (d,) = compare(desired, {0: (True, ())})
    assert "missing 3g.40gb@4" in d.describe() and "last apply failed: create 3g.40gb@4 refused" in d.describe()
    assert d.to_dict()["desired"]["error"].startswith("create")


def test_after_changes():
    assert after_changes(P("1g.10gb@0,1g.10gb@1"), P("1g.10gb@1"), P("2g.20gb@2")) == P("1g.10gb@0,2g.20gb@2")


@pytest.fixture
def gpu(tmp_path):
    return SimGpuBackend(tmp_path / "sim", "n1", gpus=["H100-80GB"])


def test_a_held_instance_is_never_planned_away_even_when_the_backend_calls_it_idle(gpu):
    idle = gpu.create_instance(0, "3g.40gb", 4)
    owned = gpu.create_instance(0, "3g.40gb", 0, owner="7")
    assert not idle.busy and owned.busy
    with pytest.raises(InUseError, match="3g.40gb@4"):  # the caller knows a job holds it
        plan_apply(gpu, 0, P("3g.40gb@0"), held={idle.gi_id})
    with pytest.raises(InUseError, match="3g.40gb@0"):  # the backend knows
        plan_apply(gpu, 0, P("3g.40gb@4"))
    assert {(i.profile, i.start) for i in gpu.list_instances(0)} == {("3g.40gb", 4), ("3g.40gb", 0)}
    steps = plan_apply(gpu, 0, P("3g.40gb@0"))  # without the caller's knowledge it would go
    assert [str(s) for s in steps] == ["destroy 3g.40gb@4"]


def test_apply_creates_with_the_owner_asked_and_counts_what_it_did(gpu):
    res = apply_layout(gpu, 0, P("3g.40gb@4,1g.10gb@0"), owners={Placement("3g.40gb", 4): "9"})
    assert res.status == "success" and res.done == 2 and res.error is None
    owners = {(i.profile, i.start): i.owner for i in gpu.list_instances(0)}
    assert owners == {("3g.40gb", 4): "9", ("1g.10gb", 0): None}


def test_a_create_the_gpu_refuses_leaves_the_rest_skipped_and_a_clear_error(gpu):
    res = apply_layout(RacingGpu(gpu), 0, P("3g.40gb@4,1g.10gb@0"))
    assert res.status == "failed" and [s.status for s in res.steps] == ["failed", "skipped"]
    assert res.error.startswith("create 3g.40gb@4 refused: ") and "overlaps 1g.10gb@4" in res.error
    # the hand's slice stays, ours after the failure was not tried
    assert [(i.profile, i.start, i.owner) for i in gpu.list_instances(0)] == [("1g.10gb", 4, "hand")]
    with pytest.raises(PlacementOccupiedError):  # an invalid layout is refused before any step
        plan_apply(gpu, 0, P("3g.40gb@4,2g.20gb@4"))
