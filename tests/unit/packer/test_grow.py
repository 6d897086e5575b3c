"""Grow by preemption (packer/grow.py): who is evicted, how many, in which order."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mig.catalog import load_catalog
from mig.fsm import PartitionState, Placement, get_space
from packer.grow import (
    EVICT_KIND,
    RESTART_KIND,
    SKIP_KIND,
    GpuShares,
    GrowSettings,
    Preemptor,
    PreemptorThreshold,
    Tenant,
    choose_evictions,
    decide_growth,
    grow_request,
    mig_fits,
    plan_growth,
    preemptor_order,
)

GIB = 1024**3
NOW = 1_000.0


def gpu(*tenants: Tenant, total: int = 8, name: str = "n1:0") -> GpuShares:
    return GpuShares(name, total, tenants)


def grower(job_id: int = 1, *, held: int = 2, lo: int = 4, hi: int = 4, since: float = 0.0,
           running: bool = True, priority: int = 0, waiting_since: float = 500.0, where: str = "n1:0"
           ) -> Preemptor:
    return Preemptor(job_id, where, running, lo, hi, since=since, waiting_since=waiting_since,
                     priority=priority, held_shares=held, why="forecast")


def decide(g: GpuShares, p: Preemptor, settings_: GrowSettings | None = None, **kw):
    return decide_growth(g, p, settings_ or GrowSettings(), NOW, **kw)


# ------------------------------------------------------------------ who may be evicted
def test_youngest_packed_neighbour_is_evicted_first():
    g = gpu(Tenant(1, 0, 2), Tenant(2, 100, 2), Tenant(3, 500, 2), Tenant(4, 900, 2))
    d = decide(g, grower(lo=4, hi=4))
    assert d.acted and d.kind == RESTART_KIND
    assert [e.job_id for e in d.evictions] == [4]
    assert d.grower_shares == 4
    assert d.evictions[0].to_head and not d.evictions[0].pair_recorded
    assert d.evictions[0].kind == EVICT_KIND


def test_two_youngest_when_one_is_not_enough():
    g = gpu(Tenant(1, 0, 2), Tenant(2, 100, 2), Tenant(3, 500, 2), Tenant(4, 900, 2))
    d = decide(g, grower(lo=6, hi=6))
    assert [e.job_id for e in d.evictions] == [4, 3]
    assert d.grower_shares == 6
    assert d.requeue_order == (4, 3, 1)  # the grower last: its priority goes above theirs
    assert d.lost_work_s == (NOW - 900) + (NOW - 500)
    assert len(d.steps) == 4 and all("evict job" in s for s in d.steps[1:3])


def test_never_an_older_job():
    g = gpu(Tenant(5, 0, 4), Tenant(1, 100, 2), Tenant(6, 200, 2))
    d = decide(g, grower(since=100, lo=6, hi=6))
    # only job 6 is younger: 2 + 2 = 4 < 6; job 5 is older and is spared
    assert not d.acted and d.kind == SKIP_KIND
    assert "fewer than its minimum 6" in d.reason and "job 5 is older" in d.reason
    assert d.evictions == ()


def test_never_a_whole_gpu_job():
    g = gpu(Tenant(1, 0, 2), Tenant(7, 500, 6, whole_gpu=True), total=8)
    d = decide(g, grower(lo=4, hi=4))
    assert not d.acted
    assert "holds the whole GPU" in d.reason


def test_never_a_job_that_may_not_be_requeued_nor_one_that_outranks():
    g = gpu(Tenant(1, 0, 2), Tenant(2, 500, 2, movable=False), Tenant(3, 600, 2, priority=50),
            Tenant(4, 700, 2))
    d = decide(g, grower(lo=4, hi=4))
    assert [e.job_id for e in d.evictions] == [4]
    d2 = decide(g, grower(lo=6, hi=6))
    assert not d2.acted
    assert "may not be requeued" in d2.reason and "outranks" in d2.reason


def test_victim_losing_too_much_work_is_spared():
    th = PreemptorThreshold(max_victim_lost_s=600.0)
    s = GrowSettings(running=th)
    young_but_long = Tenant(2, NOW - 5_000, 2)  # 5000 s of work since its start
    checkpointed = Tenant(3, NOW - 4_000, 2, work_since_checkpoint_s=100.0)
    me = Tenant(1, NOW - 9_000, 2)
    d = decide(gpu(me, checkpointed, young_but_long, total=6), grower(lo=4, hi=4, since=NOW - 9_000), s)
    assert [e.job_id for e in d.evictions] == [3]
    assert d.evictions[0].lost_work_s == 100.0


def test_fits_in_free_room_without_evicting():
    g = gpu(Tenant(1, 0, 2), Tenant(2, 500, 2))
    d = decide(g, grower(lo=4, hi=6))
    assert d.acted and d.evictions == () and d.grower_shares == 6


# ------------------------------------------------------------------ how many
def test_minimal_set_spares_a_young_job_the_target_does_not_need():
    # youngest-first picks 4 (1 share) then 3 (4 shares); 3 alone is enough, so 4 is spared
    g = gpu(Tenant(1, 0, 2), Tenant(3, 500, 4), Tenant(4, 900, 1), total=7)
    d = decide(g, grower(lo=4, hi=4))
    assert [e.job_id for e in d.evictions] == [3]


def test_choose_evictions_returns_none_when_not_enough():
    ts = [Tenant(2, 10, 1), Tenant(3, 5, 1)]
    assert choose_evictions(ts, base=1, target=4, now=NOW) is None
    assert [t.job_id for t in choose_evictions(ts, base=1, target=2, now=NOW)] == [2]


# ------------------------------------------------------------------ thresholds
def test_running_preemptor_takes_until_its_maximum():
    g = gpu(Tenant(1, 0, 2), Tenant(2, 500, 2), Tenant(3, 600, 2), Tenant(4, 700, 2))
    d = decide(g, grower(lo=4, hi=6))
    assert sorted(e.job_id for e in d.evictions) == [3, 4]
    assert d.grower_shares == 6


def test_running_preemptor_stops_at_what_it_can_reach_above_its_minimum():
    g = gpu(Tenant(9, -10, 3), Tenant(1, 0, 2), Tenant(2, 500, 1), Tenant(3, 600, 2))
    # younger: 2 (1) and 3 (2): base 2 + 0 free + 3 = 5 < max 7 but >= min 4: it takes both
    # (the seed: a running preemptor preempts until its maximum is available), never job 9
    d = decide(g, grower(lo=4, hi=7))
    assert d.acted and d.grower_shares == 5
    assert sorted(e.job_id for e in d.evictions) == [2, 3]
    # the queued threshold would stop at the minimum: only the youngest that reaches it
    rest = g.without([1])
    q = decide(GpuShares(rest.gpu, 6, rest.tenants), grower(1, held=0, lo=2, hi=7, since=400, running=False))
    assert [e.job_id for e in q.evictions] == [3] and q.grower_shares == 2


def test_queued_preemptor_takes_only_its_minimum_and_only_when_reachable():
    g = gpu(Tenant(1, 0, 2), Tenant(2, 500, 2), Tenant(3, 600, 2), Tenant(4, 700, 2), total=6 + 2)
    q = grower(1, held=0, lo=2, hi=6, since=400, running=False)
    g = GpuShares(g.gpu, 6, g.tenants)
    g = g.without([1])
    d = decide(g, q)
    assert [e.job_id for e in d.evictions] == [4]
    assert d.grower_shares == 2
    # a job that started before it was queued did not overtake it: never evicted
    d2 = decide(g, grower(1, held=0, lo=2, hi=2, since=800, running=False))
    assert not d2.acted and "older" in d2.reason


def test_thresholds_are_separate_for_running_and_queued():
    g = gpu(Tenant(1, 0, 2), Tenant(2, 500, 2), Tenant(3, 600, 2), Tenant(4, 700, 2))
    off_running = GrowSettings(running=PreemptorThreshold(enabled=False))
    assert not decide(g, grower(lo=4, hi=4), off_running).acted
    q = grower(11, held=0, lo=2, hi=2, since=400, running=False)
    assert decide(g, q, off_running).acted
    waiting = GrowSettings(queued=PreemptorThreshold(target="min", min_wait_s=600))
    d = decide(g, grower(11, held=0, lo=2, hi=2, since=400, running=False, waiting_since=NOW - 60), waiting)
    assert not d.acted and "wait 600s" in d.reason
    assert decide(g, grower(lo=4, hi=4, waiting_since=NOW - 60), waiting).acted


def test_eviction_limit_per_preemptor():
    g = gpu(Tenant(1, 0, 2), Tenant(2, 500, 2), Tenant(3, 600, 2), Tenant(4, 700, 2))
    s = GrowSettings(running=PreemptorThreshold(max_evictions=1))
    d = decide(g, grower(lo=6, hi=6), s)
    assert not d.acted and "limit is 1" in d.reason


def test_more_than_a_packed_job_may_hold_goes_through_the_queue():
    d = decide(gpu(Tenant(1, 0, 2)), grower(lo=8, hi=8), GrowSettings(max_packed_shares=7))
    assert not d.acted and "whole GPU" in d.reason


# ------------------------------------------------------------------ order of preemptors
def test_preemptors_by_priority_then_time_waited():
    a = grower(1, priority=0, waiting_since=10)
    b = grower(2, priority=5, waiting_since=50)
    c = grower(3, priority=0, waiting_since=5)
    assert [p.job_id for p in preemptor_order([a, b, c])] == [2, 3, 1]


def test_round_gives_contested_room_to_the_first_preemptor_and_drops_evicted_ones():
    g = gpu(Tenant(1, 0, 2), Tenant(2, 100, 2), Tenant(3, 600, 4))
    first = grower(1, held=2, lo=6, hi=6, since=0, waiting_since=100)
    second = grower(2, held=2, lo=6, hi=6, since=100, waiting_since=50)  # waited longer: goes first
    out = plan_growth([g], [first, second], GrowSettings(), NOW)
    assert [d.preemptor for d in out] == [2, 1]
    assert out[0].acted and [e.job_id for e in out[0].evictions] == [3]
    assert not out[1].acted and "grew this round" in out[1].reason  # job 2 is younger, but just grew
    # a preemptor evicted by an earlier one does not grow
    hi = grower(1, held=2, lo=4, hi=4, priority=9, waiting_since=100)
    lo = grower(3, held=4, lo=6, hi=6, since=600, waiting_since=50)
    out = plan_growth([g], [hi, lo], GrowSettings(), NOW)
    assert out[0].preemptor == 1 and [e.job_id for e in out[0].evictions] == [3]
    assert not out[1].acted and "evicted this round" in out[1].reason


def test_round_eviction_budget():
    g1 = gpu(Tenant(1, 0, 4), Tenant(2, 500, 4), name="a")
    g2 = gpu(Tenant(3, 0, 4), Tenant(4, 500, 4), name="b")
    ps = [grower(1, held=4, lo=6, hi=6, where="a"), grower(3, held=4, lo=6, hi=6, where="b")]
    out = plan_growth([g1, g2], ps, GrowSettings(max_evictions_per_round=1), NOW)
    assert [d.acted for d in out] == [True, False]
    assert "limit is 0" in out[1].reason


# ------------------------------------------------------------------ sizes, MIG
def test_grow_request_from_forecast_and_remembered_size():
    share = 10 * GIB
    assert grow_request(2, 25 * GIB, share, 7) == (3, 3)
    assert grow_request(2, 25 * GIB, share, 7, upper_bytes=41 * GIB) == (3, 5)
    assert grow_request(2, 25 * GIB, share, 7, remembered_shares=6) == (3, 6)
    assert grow_request(2, 75 * GIB, share, 7) is None


def test_mig_fits_refuses_evictions_that_leave_no_placeable_slice():
    space = get_space(load_catalog("A100-80GB"))
    # 1g slices at 0..6 (7 memory slices; the A100 has 8); the grower holds the one at 0
    state = PartitionState.parse(space, "1g.10gb@0,1g.10gb@1,1g.10gb@2,1g.10gb@3,1g.10gb@4,1g.10gb@5,1g.10gb@6")
    where = {10: Placement("1g.10gb", 0), 11: Placement("1g.10gb", 1), 12: Placement("1g.10gb", 6)}
    fits = mig_fits(state, where, grower=10, profile="2g.20gb")
    assert fits(frozenset({11}))  # slices 0-1 together: a 2g.20gb fits at 0
    assert not fits(frozenset({12}))  # slices 0 and 6 are not adjacent
    g = gpu(Tenant(10, 0, 1), Tenant(11, 300, 1), Tenant(12, 900, 1), total=3)
    d = decide(g, grower(10, held=1, lo=2, hi=2), fits=fits)
    # job 12 is the youngest but freeing it gives no 2g slice: job 11 goes instead
    assert [e.job_id for e in d.evictions] == [11]


# ------------------------------------------------------------------ properties
tenant_st = st.builds(
    lambda jid, start, shares, whole, movable: Tenant(jid, start, shares, whole, movable),
    st.integers(2, 60), st.floats(0, 9_000), st.integers(1, 4), st.booleans(), st.booleans())


@settings(max_examples=300, deadline=None)
@given(st.lists(tenant_st, max_size=6, unique_by=lambda t: t.job_id), st.integers(1, 3),
       st.integers(1, 6), st.integers(0, 3), st.floats(0, 5_000))
def test_never_evicts_more_than_needed_nor_a_protected_job(others, held, lo, extra, since):
    total = held + sum(t.shares for t in others) + 1
    g = GpuShares("g", total, (Tenant(1, since, held), *others))
    p = Preemptor(1, "g", True, held + lo, held + lo + extra, since=since, waiting_since=0.0, held_shares=held)
    d = decide_growth(g, p, GrowSettings(running=PreemptorThreshold(max_evictions=10, max_victim_lost_s=None)), NOW)
    if not d.acted:
        assert d.evictions == ()
        return
    ids = {e.job_id for e in d.evictions}
    by_id = {t.job_id: t for t in others}
    for e in d.evictions:
        t = by_id[e.job_id]
        assert t.started_at > since and not t.whole_gpu and t.movable
        assert not e.pair_recorded and e.to_head
    freed = sum(e.shares for e in d.evictions)
    base = held + g.free_shares
    assert p.min_shares <= d.grower_shares <= p.max_shares
    assert base + freed >= d.grower_shares
    # minimal: sparing any one victim leaves the grower below the size it got
    for e in d.evictions:
        assert base + freed - e.shares < d.grower_shares
    assert len(ids) == len(d.evictions)
