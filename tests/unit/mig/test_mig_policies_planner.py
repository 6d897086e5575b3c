"""Placement policies, merge/split planning, the event replay and the layout policies."""
from __future__ import annotations

import random
import time

import pytest

from mig.catalog import load_catalog
from mig.fsm import PartitionState, Placement, get_space
from mig.layout import LayoutJob, by_size, in_order
from mig.planner import plan_merge_split
from mig.policies import choose, choose_placement
from mig.simulate import generate_stream, parse_events, run_events

H100 = load_catalog("H100-80GB")
NO_ME = tuple(p.name for p in H100.profiles if not p.media_extensions)


@pytest.fixture
def space():
    return get_space(H100)


def test_fsm_keeps_the_most_full_configurations_reachable(space):
    s = PartitionState.parse(space, "3g.40gb@4,1g.10gb@0")
    ch = choose(s, "1g.10gb")
    assert ch.start == 1
    assert ch.reachable_full_configs == max(a.reachable_full_configs for a in ch.alternatives)
    assert [a.start for a in ch.alternatives] == [1, 2, 3]


def test_fsm_ties_go_to_the_lowest_start(space):
    s = PartitionState.parse(space, "4g.40gb@0")
    ch = choose(s, "1g.10gb")
    best = max(a.reachable_full_configs for a in ch.alternatives)
    assert ch.start == min(a.start for a in ch.alternatives if a.reachable_full_configs == best)


def test_first_fit_random_and_no_fit(space):
    s = PartitionState.parse(space, "1g.10gb@0")
    assert choose_placement(s, "1g.10gb", "first-fit") == 1
    starts = {choose_placement(s, "1g.10gb", "random", rng=random.Random(i)) for i in range(30)}
    assert starts <= {1, 2, 3, 4, 5, 6} and len(starts) > 1
    full = PartitionState.parse(space, "7g.80gb@0")
    ch = choose(full, "1g.10gb")
    assert ch.start is None and ch.alternatives == () and ch.reachable_full_configs == 0
    with pytest.raises(ValueError, match="unknown placement policy"):
        choose(s, "1g.10gb", "best")


def test_demand_policy_keeps_room_for_what_the_queue_asks_for():
    sp = get_space(H100, NO_ME)
    s = PartitionState.parse(sp, "1g.10gb@0")  # 3g.40gb@0 is already blocked
    # fsm puts 1g.20gb at 6, which blocks 3g.40gb@4 as well
    assert choose_placement(s, "1g.20gb", "fsm") == 6
    start = choose_placement(s, "1g.20gb", "demand", demand={"3g.40gb": 3})
    assert start is not None and s.alloc("1g.20gb", start).successors("3g.40gb")


def test_demand_choice_maximises_the_demanded_capacity():
    sp = get_space(H100, NO_ME)
    rng = random.Random(7)
    for mask in rng.sample(sorted(sp.reach), 200):
        s = PartitionState(sp, mask)
        req, want = rng.choice(NO_ME), rng.choice(NO_ME)
        ch = choose(s, req, "demand", demand={want: 1})
        if ch.start is None:
            continue
        pos = sp.profile_pos[want]
        best = max(sp.profile_max[nxt.mask][pos] for _, nxt in s.successors(req))
        assert sp.profile_max[s.alloc(req, ch.start).mask][pos] == best


def test_decision_latency_under_a_millisecond(space):
    s = PartitionState.parse(space, "3g.40gb@4,1g.10gb@0")
    t0 = time.perf_counter()
    for _ in range(1000):
        choose(s, "1g.10gb")
    assert (time.perf_counter() - t0) / 1000 < 1e-3


def test_merge_split_destroys_the_fewest_idle_instances(space):
    s = PartitionState.parse(space, "1g.10gb@0,1g.10gb@2,1g.10gb@4,1g.10gb@6")
    plan = plan_merge_split(s, "3g.40gb", busy=[Placement("1g.10gb", 0)])
    assert plan.feasible and plan.start == 4
    assert set(plan.destroy) == {Placement("1g.10gb", 4), Placement("1g.10gb", 6)}
    assert Placement("1g.10gb", 0) not in plan.destroy
    assert len(plan.recreate) == 2  # both re-created beside the busy one
    final = s
    for p in plan.destroy:
        final = final.free(p.profile, p.start)
    final = final.alloc("3g.40gb", plan.start)
    for p in plan.recreate:
        final = final.alloc(p.profile, p.start)
    assert plan.steps[0].startswith("destroy")


def test_merge_split_fits_directly_or_reports_why(space):
    s = PartitionState.parse(space, "1g.10gb@0")
    plan = plan_merge_split(s, "1g.10gb", busy=[("1g.10gb", 0)])
    assert plan.feasible and plan.destroy == () and plan.reason == "fits without reconfiguration"
    blocked = plan_merge_split(s, "7g.80gb", busy=[("1g.10gb", 0)])
    assert not blocked.feasible and blocked.start is None
    assert "1g.10gb@0" in blocked.reason and "wait" in blocked.reason


def test_merge_split_splits_a_larger_idle_instance(space):
    s = PartitionState.parse(space, "7g.80gb@0")
    plan = plan_merge_split(s, "1g.10gb")
    assert plan.feasible and plan.destroy == (Placement("7g.80gb", 0),) and plan.recreate == ()


EVENTS = """\
# comment
alloc a 3g.40gb
alloc b 4g.40gb
alloc c 1g.10gb
free a
free zz
alloc d 7g.80gb
"""


def test_replay_counts_rejections_and_fragmentation():
    events = parse_events(EVENTS)
    res = run_events(get_space(H100), events, "fsm")
    assert res.to_dict() == {"requests": 4, "rejected": 2, "rejected_fragmentation": 0}
    ev = parse_events("alloc a 1g.10gb\nalloc b 1g.10gb\nalloc c 4g.40gb\n")
    # first-fit puts 1g at 0 and 1, so 4g.40gb@0 is blocked with 6 slices free
    assert run_events(get_space(H100), ev, "first-fit").to_dict() == {
        "requests": 3, "rejected": 1, "rejected_fragmentation": 1}
    assert run_events(get_space(H100), ev, "fsm").rejected == 0


def test_replay_ignores_free_of_rejected_alloc_and_reports_bad_lines():
    ev = parse_events("alloc a 7g.80gb\nalloc b 1g.10gb\nfree b\nfree a\nalloc c 7g.80gb\n")
    assert run_events(get_space(H100), ev).to_dict() == {
        "requests": 3, "rejected": 1, "rejected_fragmentation": 0}
    with pytest.raises(ValueError, match="line 2"):
        parse_events("alloc a 1g.10gb\nalloc b\n")


@pytest.mark.parametrize("policy", ["fsm", "first-fit", "random", "demand"])
def test_replay_of_generated_streams_stays_valid(policy):
    events = generate_stream(NO_ME, (4, 2, 2, 1, 1, 0.2), 300, seed=3)
    res = run_events(get_space(H100, NO_ME), events, policy, seed=3)
    assert res.requests == 300 and 0 <= res.rejected_fragmentation <= res.rejected < 300


def _jobs(n=30, seed=0):
    r = random.Random(seed)
    return [LayoutJob(f"j{i}", r.choice([4000, 9000, 18000, 30000, 60000]), r.uniform(1, 10))
            for i in range(n)]


def _no_overlap(res, space):
    # jobs that overlap in time must not overlap in memory slices
    for a in res.jobs:
        for b in res.jobs:
            if a is b or a.end_time <= b.start_time or b.end_time <= a.start_time:
                continue
            sa = space.slot(a.placement.profile, a.placement.start)
            sb = space.slot(b.placement.profile, b.placement.start)
            assert a.placement != b.placement and not (sa.mem_mask & sb.mem_mask)


@pytest.mark.parametrize("policy", [by_size, in_order])
def test_layout_policies_run_every_job_without_overlap(policy):
    jobs = _jobs()
    res = policy(jobs, H100, NO_ME)
    assert sorted(j.id for j in res.jobs) == sorted(j.id for j in jobs)
    assert res.unplaceable == []
    _no_overlap(res, get_space(H100, NO_ME))
    for j in res.jobs:
        assert H100.profile(j.profile).memory_mib >= next(x.memory_mib for x in jobs if x.id == j.id)


def test_by_size_reconfigures_less_than_in_order():
    jobs = _jobs(40, seed=1)
    a, b = by_size(jobs, H100, NO_ME), in_order(jobs, H100, NO_ME)
    assert a.reconfigurations < b.reconfigurations
    # policy B is FIFO: start times follow arrival order
    starts = [j.start_time for j in b.jobs]
    assert starts == sorted(starts)


def test_layout_reports_jobs_too_big_for_the_gpu():
    res = by_size([LayoutJob("big", 10**7, 1.0)], H100, NO_ME)
    assert res.unplaceable == ["big"] and res.jobs == []
