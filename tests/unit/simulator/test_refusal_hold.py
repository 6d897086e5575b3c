"""colocate's held refusals (simulator.refusal_hold) and the passes answered unwalked
(simulator.steady_pass): the admission's bound is sound (every pack it holds is refused at
every clock, queue and release it allows) and expires where a pack would pay; every input a
hold or a noted pass rests on, changed alone, sends the try (the pass) back to be judged, so
a stale answer fails these tests; and a loaded replay gives the reference's results with
both at work."""
from __future__ import annotations

import math
import random
from collections import deque
from types import SimpleNamespace

import pytest

from packer.admission import AdmissionRule, refusal_holds
from simulator import SimConfig, Simulator, summary
from simulator.pack_memo import Refusal
from simulator.refusal_hold import RefusalHolds
from simulator.state import Gpu
from simulator.steady_pass import SteadyPass
from tests.unit.simulator.test_sim_fast_and_colocate import PAIRS, PROFILES, outcome, random_trace

RULE = AdmissionRule(0.5)


def _pays_later(case: dict, dt: float, waiting: int, later: float) -> bool:
    """The admission ``dt`` seconds on, ``waiting`` jobs behind, the release ``later`` s later."""
    residents = [(max(0.0, rem - dt * rate), s) for rem, s, rate in case["residents"]]
    return RULE.pays_values(case["newcomer_s"], case["speed"], residents, waiting, case["gpus"],
                            max(0.0, case["wait_s"] + later - dt))


def _random_refused(rng: random.Random) -> dict | None:
    k = rng.choice([1, 1, 1, 2])
    case = {"newcomer_s": rng.uniform(10, 50_000), "speed": rng.uniform(0.3, 1.0),
            "residents": [(rng.uniform(0, 80_000), rng.uniform(0.3, 1.0), rng.uniform(0.2, 1.0)) for _ in range(k)],
            "waiting": rng.randrange(0, 3000), "gpus": rng.choice([40, 450, 700]),
            "wait_s": rng.choice([0.0, rng.uniform(0, 20_000)])}
    if _pays_later(case, 0.0, case["waiting"], 0.0):
        return None
    return case


def test_a_held_refusal_stays_refused_at_every_clock_queue_and_release_it_allows():
    rng = random.Random(7)
    finite = forever = checked = 0
    for _ in range(4000):
        case = _random_refused(rng)
        if case is None:
            continue
        bound = refusal_holds(case["newcomer_s"], case["speed"], case["residents"], case["waiting"],
                              case["gpus"], case["wait_s"], RULE.min_speed)
        if bound.seconds <= 0.0:
            continue
        finite += math.isfinite(bound.seconds)
        forever += math.isinf(bound.seconds)
        assert bound.fewest <= case["waiting"] <= bound.most
        for _ in range(20):
            dt = rng.uniform(0, min(bound.seconds, 1e6))
            waiting = rng.randint(bound.fewest, min(bound.most, bound.fewest + 100_000))
            later = rng.uniform(0, min(bound.later_s, 1e6))
            assert not _pays_later(case, dt, waiting, later), (case, bound, dt, waiting, later)
            checked += 1
    assert finite > 100 and forever > 100 and checked > 10_000  # the bound does something, both ways


def test_a_hold_expires_before_the_pack_would_pay():
    # the resident nearly done: the overlap shrinks faster than the wait, the gain rises with time
    case = {"newcomer_s": 1000.0, "speed": 0.55, "residents": [(500.0, 0.55, 1.0)], "waiting": 0,
            "gpus": 40, "wait_s": 600.0}
    assert not _pays_later(case, 0.0, 0, 0.0)
    bound = refusal_holds(case["newcomer_s"], case["speed"], case["residents"], 0, 40, 600.0, 0.5)
    assert 0.0 < bound.seconds < math.inf
    assert _pays_later(case, 400.0, 0, 0.0)  # held past its bound, the answer would be stale
    assert bound.seconds < 400.0
    assert not _pays_later(case, bound.seconds * 0.999, 0, bound.later_s)
    # a longer queue makes a GPU-time-saving pack pay: the queues allowed stop short of that
    saving = {"newcomer_s": 5000.0, "speed": 0.8, "residents": [(9000.0, 0.8, 1.0)], "waiting": 10,
              "gpus": 40, "wait_s": 0.0}
    assert not _pays_later(saving, 0.0, 10, 0.0)
    b = refusal_holds(5000.0, 0.8, [(9000.0, 0.8, 1.0)], 10, 40, 0.0, 0.5)
    assert b.fewest == 0 and 10 <= b.most < math.inf
    assert _pays_later(saving, 0.0, 10_000, 0.0) and not _pays_later(saving, 0.0, b.most, 0.0)


def test_below_the_fairness_floor_a_refusal_holds_for_good():
    b = refusal_holds(100.0, 0.4, [(100.0, 0.9, 1.0)], 5, 40, 10.0, 0.5)
    assert (b.seconds, b.fewest, b.later_s) == (math.inf, 0, math.inf) and b.most > 1 << 30


# ---------------------------------------------------------------- RefusalHolds' inputs
class _Job(SimpleNamespace):
    def left(self, now: float) -> float:
        return max(0.0, self.duration - self.done - (now - self.last_t) * self.rate)


def _world(*, free: bool):
    """A colocate state with one refused pack noted: ``free`` (a one-GPU head: no reservation
    honoured) or with a reservation honoured at 5,000 s."""
    resident = _Job(id=1, token=3, duration=4000.0, done=0.0, last_t=0.0, rate=1.0)
    g = Gpu(7)
    g.jobs = [resident]
    job = _Job(id=2, token=0, remembered=0, duration=3000.0, done=0.0)
    others = {i: _Job(id=i) for i in range(10, 30)}
    sched = SimpleNamespace(position=1, front=deque(), queue={99: _Job(id=99), 2: job, **others},
                            dirty=False, refused=False, denied=True)
    ranked = object()
    memo = SimpleNamespace(kinds_version=0, best=lambda: ranked)
    w = SimpleNamespace(
        sched=sched, job=job, g=g, memo=memo, ranked=ranked, group={7: None, 8: None}, idle={},
        releases=SimpleNamespace(sorted=[(1000.0, 3), (2000.0, 7), (9000.0, 8)], stamp=5),
        shares=SimpleNamespace(version=4, changes=9), know=SimpleNamespace(version=2),
        avoid=set(), history={0}, refusals=SimpleNamespace(hits=0, kept=0), refreshed=[], guess=[0])
    w.holds = RefusalHolds(rules=SimpleNamespace(admission="load-aware", min_speed=0.5), sched=sched, gpus=4,
                           releases=w.releases, shares=w.shares, know=w.know, avoid=w.avoid, history=w.history,
                           idle=w.idle, refusals=w.refusals, refresh=w.refreshed.append,
                           guess_version=lambda: w.guess[0])
    shadow = None if free else 5000.0
    w.bf = SimpleNamespace(pack_ok=free, shadow=shadow, head=_Job(id=99, token=0, gpus=1))
    # both at half speed: a costly overlap that frees no GPU-time (any longer queue holds)
    w.hit = Refusal((job.token, job.remembered, memo, 1, 0), shadow, None, w.group, g, 0.5, (0.5,), ranked, 0)
    assert not RULE.pays_values(3000.0, 0.5, [(4000.0, 0.5)], 20, 4, 2000.0)
    w.holds.note(job, w.hit, 0.0, w.bf)
    assert w.holds.held(job) is not None
    return w


def _still(w, now: float = 1.0) -> bool:
    return w.holds.still_refused(w.job, now, w.bf)


@pytest.mark.parametrize("free", [True, False])
def test_a_hold_answers_for_the_try_and_marks_the_pass(free):
    w = _world(free=free)
    assert _still(w) and _still(w, 2.0)
    assert w.sched.dirty and w.sched.refused and not w.sched.denied
    assert w.refusals.hits == 2 and w.holds.skips == 2


def _bump(obj, attr):
    setattr(obj, attr, getattr(obj, attr) + 1)


CHANGES = {
    "clock past the bound": lambda w: setattr(w, "now", w.holds.held(w.job).until),
    "the job's attempt": lambda w: _bump(w.job, "token"),
    "the job's remembered size": lambda w: _bump(w.job, "remembered"),
    "a GPU idle": lambda w: w.idle.update({5: None}),
    "a pair learned or a refit": lambda w: _bump(w.know, "version"),
    "a pair to avoid": lambda w: w.avoid.add(("a", "b")),
    "a workload with a history": lambda w: w.history.add(1),
    "an identity level": lambda w: w.guess.__setitem__(0, 1),
    "the resident's speed": lambda w: _bump(w.g.jobs[0], "token"),
    "another resident": lambda w: setattr(w.g, "jobs", [_Job(id=5, token=3, duration=9.0, done=0.0, last_t=0.0,
                                                             rate=1.0)]),
    "a later release": lambda w: w.releases.sorted.insert(0, (0.5, 9)) or w.releases.sorted.__setitem__(
        1, (1e7, 3)),
    "a shorter queue": lambda w: w.sched.queue.pop(10),
    "its place in the pass": lambda w: _bump(w.sched, "position"),
}
FREE_ONLY = {
    "another kind ranked first": lambda w: setattr(w.memo, "best", lambda: object()),
    "another first GPU of the kind": lambda w: w.group.pop(7) and None or w.group.update({7: None}),
    "a head that asks for a reservation": lambda w: setattr(w.bf, "pack_ok", False),
}
STRICT_ONLY = {
    "a release or a speed anywhere": lambda w: _bump(w.releases, "stamp"),
    "a GPU filed anywhere": lambda w: _bump(w.shares, "changes"),
    "another reservation": lambda w: setattr(w.bf, "shadow", 5001.0),
    "a one-GPU head": lambda w: setattr(w.bf, "pack_ok", True),
}


@pytest.mark.parametrize("free,change", [(f, c) for f in (True, False) for c in CHANGES]
                         + [(True, c) for c in FREE_ONLY] + [(False, c) for c in STRICT_ONLY])
def test_each_input_changed_alone_sends_the_try_back(free, change):
    w = _world(free=free)
    w.now = 1.0
    (CHANGES | FREE_ONLY | STRICT_ONLY)[change](w)
    assert not _still(w, w.now)
    assert w.holds.held(w.job) is None  # gone: the try judges again and notes anew
    assert not w.sched.refused and w.refusals.hits == 0


def test_a_longer_queue_holds_where_the_pack_frees_no_gpu_time():
    w = _world(free=True)
    w.sched.queue.update({i: _Job(id=i) for i in range(100, 400)})  # freed < 0: more queue only lowers the gain
    assert _still(w)


def test_new_kinds_of_gpu_bring_the_memo_up_to_date_first():
    w = _world(free=True)
    _bump(w.shares, "version")
    assert _still(w)  # the same kind still ranked first
    assert w.refreshed == [w.memo]


# ---------------------------------------------------------------- SteadyPass
def _steady(*, held: bool = True):
    w = _world(free=True)
    w.sched.releases, w.sched.shares, w.sched.edits = w.releases, w.shares, 0
    steady = SteadyPass(w.sched, w.holds)
    steady.begin()
    if not held:
        w.holds.forget(w.job)
    steady.refused(w.job)
    return w, steady


def test_a_pass_that_only_refused_held_packs_is_answered_until_an_input_moves():
    w, steady = _steady()
    bf = SimpleNamespace(computed=False)
    steady.end(False, bf, 0.0)
    assert steady.holds_now(1.0) and steady.holds_now(2.0)
    w.sched.queue.update({i: _Job(id=i) for i in range(100, 103)})  # arrivals behind the window
    assert steady.holds_now(3.0)
    assert steady.answered == 3


PASS_CHANGES = {
    "clock past a hold": lambda w: setattr(w, "now", w.holds.held(w.job).until),
    "a start, end or change of speed": lambda w: _bump(w.releases, "stamp"),
    "a GPU filed": lambda w: _bump(w.shares, "changes"),
    "the pair knowledge": lambda w: _bump(w.know, "version"),
    "the queue's window": lambda w: _bump(w.sched, "edits"),
    "a queue one hold does not allow": lambda w: [w.sched.queue.pop(i) for i in range(10, 15)],
}


@pytest.mark.parametrize("change", PASS_CHANGES)
def test_each_input_of_a_noted_pass_changed_alone_walks_it_again(change):
    w, steady = _steady()
    steady.end(False, SimpleNamespace(computed=False), 0.0)
    w.now = 1.0
    PASS_CHANGES[change](w)
    assert not steady.holds_now(w.now)


@pytest.mark.parametrize("case", ["a refusal not held", "a start", "a reservation at the clock"])
def test_a_pass_is_not_noted_when_a_rerun_could_differ(case):
    w, steady = _steady(held=case != "a refusal not held")
    bf = SimpleNamespace(computed=case == "a reservation at the clock", shadow=0.0)
    steady.end(case == "a start", bf, 0.0)
    assert not steady.holds_now(1.0)


# ---------------------------------------------------------------- a loaded replay
def test_a_loaded_replay_with_holds_gives_the_reference_results():
    specs = random_trace(900, seed=11)
    sims, outs = {}, {}
    for fast in (True, False):
        sim = sims[fast] = Simulator(SimConfig(policy="colocate", gpus=12, predictor=True, fast=fast, bf_depth=20,
                                               admission="load-aware"), specs, PROFILES, PAIRS)
        outs[fast] = sim.run()
    assert outcome(outs[True]) == outcome(outs[False])
    assert summary(outs[True]) | {"sim_wall_s": 0, "sim_passes": 0, "sim_passes_skipped": 0} == \
        summary(outs[False]) | {"sim_wall_s": 0, "sim_passes": 0, "sim_passes_skipped": 0}
    fast = sims[True]
    assert fast.policy.holds.skips > 0 and fast.sched.steady.answered > 0  # both were at work
    assert sims[False].policy.holds.skips == 0 and sims[False].sched.steady.answered == 0  # the reference walks all
