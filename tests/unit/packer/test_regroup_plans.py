"""Regrouping plans (packer/regroup*.py): what is moved, where, when, and only when worth it."""
from __future__ import annotations

import pytest

from mig.catalog import load_catalog
from mig.fsm import PartitionState, Placement, get_space
from mig.planner import plan_merge_split
from packer.regroup import PLAN_KIND, SKIP_KIND, plan_regroup
from packer.regroup_budget import MoveBudget
from packer.regroup_model import Cluster, GpuInfo, HeadJob, Holding, Movability, RunningJob, SignalSpec
from packer.regroup_plan import RegroupSettings

NOW = 10_000.0
SIG = Movability(requeue=True, signal=SignalSpec("USR1", 120, True))
STUCK = Movability()  # no --requeue: never moved
LONG = 50_000.0


def nodes(*spec: tuple[str, int]) -> tuple[GpuInfo, ...]:
    return tuple(GpuInfo(n, i) for n, k in spec for i in range(k))


def packed(job_id: int, node: str, gpu: int, shares: int = 4, remaining: float = LONG, move=SIG, **kw) -> RunningJob:
    return RunningJob(job_id, (Holding(node, gpu, shares=shares),), NOW - 1000, remaining, move, **kw)


def whole(job_id: int, *where: tuple[str, int], remaining: float = LONG, move=STUCK, **kw) -> RunningJob:
    return RunningJob(job_id, tuple(Holding(n, i) for n, i in where), NOW - 1000, remaining, move, **kw)


def fragmented(**kw) -> Cluster:
    """Two GPUs each half-used by one packed job: the head wants one whole GPU."""
    return Cluster(nodes(("a", 2)), (packed(1, "a", 0, **kw), packed(2, "a", 1)))


# ------------------------------------------------------------------ consolidation
def test_packed_jobs_consolidated_to_free_a_whole_gpu():
    d = plan_regroup(fragmented(), HeadJob(99, 1), NOW)
    assert d.kind == PLAN_KIND and d.chosen.kind == "consolidate-packed"
    p = d.chosen
    assert len(p.moves) == 1
    (m,) = p.moves
    freed = p.frees[0]
    assert m.src == (freed,) and m.to[0].gpu != freed and m.to[0].shares == 4
    assert m.wait_s == 120 and m.lost_s == 0  # waits for its checkpoint signal
    assert p.head_start_with == NOW + 120 + 30
    assert p.head_gain_s == pytest.approx(LONG - 150)
    kinds = [a.kind for a in p.actions]
    assert kinds == ["regroup-signal", "regroup-requeue", "regroup-restart", "regroup-head-start"]
    assert p.actions[0].signal == "USR1" and p.actions[0].batch_only
    assert [a.at for a in p.actions] == sorted(a.at for a in p.actions)
    assert all(a.reason for a in p.actions)


def test_head_that_fits_now_needs_no_plan():
    c = Cluster(nodes(("a", 3)), (packed(1, "a", 0), packed(2, "a", 1)))
    d = plan_regroup(c, HeadJob(99, 1), NOW)
    assert d.kind == SKIP_KIND and "fits now" in d.reason


def test_head_that_fits_now_over_several_nodes_needs_no_plan():
    gpus = nodes(*((f"n{i}", 8) for i in range(12)))
    jobs = tuple(whole(100 + i, (f"n{i}", 0), (f"n{i}", 1)) for i in range(12))  # 6 idle GPUs per node
    d = plan_regroup(Cluster(gpus, jobs), HeadJob(99, 12, max_nodes=2), NOW)
    assert d.chosen is None and "fits now" in d.reason
    d = plan_regroup(Cluster(gpus, jobs), HeadJob(99, 13, max_nodes=2), NOW)
    assert "fits now" not in d.reason


def test_only_movable_jobs_are_touched():
    c = Cluster(nodes(("a", 2)), (packed(1, "a", 0, move=STUCK), packed(2, "a", 1, move=Movability(requeue=True))))
    d = plan_regroup(c, HeadJob(99, 1), NOW)
    assert d.chosen is None and d.considered == ()
    # one movable job is enough: it is the one moved
    c = Cluster(nodes(("a", 2)), (packed(1, "a", 0, move=STUCK), packed(2, "a", 1)))
    d = plan_regroup(c, HeadJob(99, 1), NOW)
    assert [m.job_id for m in d.chosen.moves] == [2]


# ------------------------------------------------------------------ gain against cost
def test_not_worth_it_when_the_gpu_frees_itself_soon():
    c = Cluster(nodes(("a", 2)), (packed(1, "a", 0, remaining=200), packed(2, "a", 1, remaining=200)))
    d = plan_regroup(c, HeadJob(99, 1), NOW)
    assert d.chosen is None and "not worth it" in d.reason
    assert d.considered and d.considered[0].head_gain_s == pytest.approx(50)  # 200 - (120 + 30)


def test_lost_work_counts_against_a_job_without_checkpoints():
    admin = Movability(admin=True)  # movable by the admin, but it never checkpoints
    cheap = RunningJob(1, (Holding("a", 0, shares=4),), NOW - 600, 20_000, admin)
    dear = RunningJob(2, (Holding("a", 1, shares=4),), NOW - 15_000, 20_000, admin)
    d = plan_regroup(Cluster(nodes(("a", 2)), (cheap, dear)), HeadJob(99, 1), NOW)
    assert [m.job_id for m in d.chosen.moves] == [1]  # the one losing 600 s, not 15 000 s
    assert d.chosen.lost_work_s == 600 and d.chosen.moves[0].wait_s == 0
    # the head gains less than the work it would destroy: nothing is done
    short = HeadJob(99, 1, expected_start=NOW + 900)
    d = plan_regroup(Cluster(nodes(("a", 2)), (cheap, dear)), short, NOW)
    assert d.chosen is None and "not worth it" in d.reason


def test_gpu_seconds_unit_weighs_the_heads_gpus():
    s = RegroupSettings(unit="gpu")
    c = Cluster(nodes(("a", 2)), (packed(1, "a", 0), packed(2, "a", 1)))
    d = plan_regroup(c, HeadJob(99, 1), NOW, s)
    p = d.chosen
    assert p.gain() == pytest.approx(p.head_gain_s * 1 + sum(m.saved_jct_s * m.gpus_used for m in p.moves))
    assert p.cost() == pytest.approx(sum(m.cost_jct_s * 0.5 for m in p.moves))


def test_pair_speed_picks_the_kinder_neighbour_and_costs_the_slowdown():
    speeds = {("x", "bad"): 0.5, ("bad", "x"): 0.5, ("x", "good"): 0.95, ("good", "x"): 0.95}
    c = Cluster(nodes(("a", 3)), (
        packed(1, "a", 0, workload="x"),
        packed(2, "a", 1, workload="bad"),
        packed(3, "a", 2, workload="good"),
    ))
    d = plan_regroup(c, HeadJob(99, 1), NOW, pair_speed=lambda a, b: speeds.get((a, b)))
    p = d.chosen
    m = next(m for m in p.moves if m.job_id == 1)
    assert m.to[0].gpu == ("a", 2)  # beside "good"
    assert m.run_delta_s == pytest.approx(LONG * (1 / 0.95 - 1))
    assert m.side_delta_s == pytest.approx(LONG * (1 / 0.95 - 1))
    assert p.frees == (("a", 0),)


# ------------------------------------------------------------------ multi-GPU and nodes
def spread_cluster(**kw) -> Cluster:
    """Head wants a whole 4-GPU node. Job 10 sits on a:0 and b:0; node c has 2 idle GPUs."""
    return Cluster(nodes(("a", 4), ("b", 4), ("c", 4)), (
        whole(10, ("a", 0), ("b", 0), move=SIG, remaining=20_000, **kw),
        whole(11, ("b", 1), ("b", 2), ("b", 3)),
        whole(12, ("c", 2), ("c", 3)),
    ))


def test_multi_gpu_job_brought_onto_fewer_nodes_frees_a_node():
    s = RegroupSettings(spread_penalty=0.25)
    d = plan_regroup(spread_cluster(), HeadJob(99, 4, max_nodes=1), NOW, s)
    p = d.chosen
    assert p.kind == "compact-multi-gpu"
    (m,) = p.moves
    assert m.job_id == 10 and {h.node for h in m.to} == {"c"} and len(m.to) == 2
    assert sorted(p.frees) == [("a", i) for i in range(4)]
    # compact now: it runs 1.25x faster for the rest of its run
    assert m.run_delta_s == pytest.approx(20_000 * (1 / 1.25 - 1))
    assert m.saved_jct_s > 0 and p.gain_jct_s > p.head_gain_s
    assert p.head_start_without == NOW + 20_000


def test_a_whole_gpu_job_never_lands_on_more_nodes():
    c = Cluster(nodes(("a", 4), ("b", 4), ("c", 4), ("d", 4)), (
        whole(10, ("a", 0), ("a", 1), move=SIG),  # compact on a, blocks a for a 4-GPU head
        whole(11, ("b", 0), ("b", 1), ("b", 2)),
        whole(12, ("c", 0), ("c", 1), ("c", 2)),
        whole(13, ("d", 0), ("d", 1), ("d", 2)),
    ))
    # idle: a:2, a:3, b:3, c:3, d:3; job 10 could only go to 2 different nodes: refused
    d = plan_regroup(c, HeadJob(99, 4, max_nodes=1), NOW)
    assert d.chosen is None and any("no room elsewhere" in n for n in d.notes)


def test_moves_per_plan_bound():
    c = Cluster(nodes(("a", 3)), (packed(1, "a", 0, shares=2), packed(2, "a", 0, shares=2),
                                  packed(3, "a", 1, shares=2), packed(4, "a", 2, shares=2)))
    # a:1 and a:2 each have one packed job: clearing either takes one move
    assert len(plan_regroup(c, HeadJob(99, 1), NOW, max_moves=1).chosen.moves) == 1
    c = Cluster(nodes(("a", 2)), (packed(1, "a", 0, shares=2), packed(2, "a", 0, shares=2),
                                  packed(3, "a", 1, shares=2), packed(4, "a", 1, shares=2)))
    c = Cluster(c.gpus, c.jobs, max_jobs_per_gpu=4)
    assert plan_regroup(c, HeadJob(99, 1), NOW, max_moves=1).chosen is None
    d = plan_regroup(c, HeadJob(99, 1), NOW, max_moves=2)
    assert len(d.chosen.moves) == 2


def test_budget_bounds_moves_per_hour():
    t = [0.0]
    b = MoveBudget(per_plan=2, per_hour=2, clock=lambda: t[0])
    d = plan_regroup(fragmented(), HeadJob(99, 1), NOW, budget=b)
    assert d.chosen is not None
    b.record(d.moves)
    b.record(1)
    d = plan_regroup(fragmented(), HeadJob(99, 1), NOW, budget=b)
    assert d.chosen is None and "budget spent" in d.reason
    t[0] = 3600.0
    assert plan_regroup(fragmented(), HeadJob(99, 1), NOW, budget=b).chosen is not None


# ------------------------------------------------------------------ MIG re-layout
def mig_cluster(move_1=SIG) -> tuple[Cluster, PartitionState, PartitionState]:
    space = get_space(load_catalog("A100-80GB"))
    a = PartitionState.parse(space, "1g.10gb@0,1g.10gb@4")
    b = PartitionState.parse(space, "3g.40gb@0")
    c = Cluster((GpuInfo("a", 0, mig=a), GpuInfo("b", 0, mig=b)), (
        RunningJob(1, (Holding("a", 0, placement=Placement("1g.10gb", 0)),), NOW - 500, LONG, move_1),
        RunningJob(2, (Holding("a", 0, placement=Placement("1g.10gb", 4)),), NOW - 500, LONG, STUCK),
        RunningJob(3, (Holding("b", 0, placement=Placement("3g.40gb", 0)),), NOW - 500, LONG, STUCK),
    ))
    return c, a, b


def test_mig_relayout_moves_the_blocking_instance_and_the_fsm_accepts_both_layouts():
    c, a, b = mig_cluster()
    assert not plan_merge_split(a, "4g.40gb", busy=list(a.placements)).feasible
    d = plan_regroup(c, HeadJob(99, mig_profile="4g.40gb"), NOW)
    p = d.chosen
    assert p.kind == "mig-relayout" and p.frees == (("a", 0),)
    (m,) = p.moves
    assert m.job_id == 1
    dest = m.to[0]
    assert dest.gpu == ("b", 0) and dest.placement.profile == "1g.10gb"
    # the layouts the plan implies are valid states of the MIG state machine
    b.alloc(dest.placement.profile, dest.placement.start)
    after_a = a.free("1g.10gb", 0).alloc("4g.40gb", 0)
    assert Placement("1g.10gb", 4) in after_a
    assert p.head_target == "a:0 mig:4g.40gb@0"
    assert p.head_gpus == pytest.approx(0.5)


def test_mig_relayout_needs_a_movable_blocker():
    c, _, _ = mig_cluster(move_1=STUCK)
    d = plan_regroup(c, HeadJob(99, mig_profile="4g.40gb"), NOW)
    assert d.chosen is None and d.considered == ()


def test_mig_head_that_fits_after_destroying_idle_slices_needs_no_move():
    space = get_space(load_catalog("A100-80GB"))
    a = PartitionState.parse(space, "1g.10gb@0,1g.10gb@4")  # both idle
    c = Cluster((GpuInfo("a", 0, mig=a),), ())
    d = plan_regroup(c, HeadJob(99, mig_profile="4g.40gb"), NOW)
    assert d.chosen is None and "fits now" in d.reason


# ------------------------------------------------------------------ properties
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def clusters(draw):
    n_nodes = draw(st.integers(1, 3))
    per = draw(st.integers(1, 3))
    gpus = nodes(*((f"n{i}", per) for i in range(n_nodes)))
    jobs: list[RunningJob] = []
    jid = 1
    for g in gpus:
        kind = draw(st.sampled_from(["idle", "whole", "packed1", "packed2"]))
        movable = lambda: draw(st.sampled_from([SIG, STUCK, Movability(admin=True)]))  # noqa: E731
        rem = draw(st.floats(100, 60_000))
        if kind == "whole":
            jobs.append(RunningJob(jid, (Holding(g.node, g.index),), NOW - 100, rem, movable()))
            jid += 1
        elif kind.startswith("packed"):
            for _ in range(int(kind[-1])):
                jobs.append(RunningJob(jid, (Holding(g.node, g.index, shares=draw(st.integers(1, 4))),),
                                       NOW - draw(st.floats(0, 5000)), rem, movable()))
                jid += 1
    return Cluster(gpus, tuple(jobs))


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(1, 3), st.integers(1, 3))
def test_a_chosen_plan_is_feasible_bounded_and_touches_only_movable_jobs(c, want, max_moves):
    d = plan_regroup(c, HeadJob(99, want), NOW, max_moves=max_moves)
    if d.chosen is None:
        return
    p = d.chosen
    by_id = {j.job_id: j for j in c.jobs}
    assert p.worth_it and 1 <= len(p.moves) <= max_moves and len(p.frees) == want
    moved = {m.job_id for m in p.moves}
    assert all(by_id[i].move.movable for i in moved)
    # after the moves: the head's GPUs are empty, and no GPU is over its shares or job count
    holdings = [h for j in c.jobs if j.job_id not in moved for h in j.holdings]
    holdings += [h for m in p.moves for h in m.to]
    for key in p.frees:
        assert not any(h.gpu == key for h in holdings)
    for g in c.gpus:
        here = [h for h in holdings if h.gpu == g.key]
        if any(h.whole for h in here):
            assert len(here) == 1
        else:
            assert sum(h.shares for h in here) <= g.shares and len(here) <= c.max_jobs_per_gpu
    assert p.actions[-1].kind == "regroup-head-start" and p.actions[-1].at == p.head_start_with
