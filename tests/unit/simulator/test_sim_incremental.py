"""The replay's incremental decisions: what a pass learns is kept until what it rests on
changes (simulator.late_scan, simulator.pack_memo), and the answers are those without it."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from simulator import SimConfig, load_workload, summary
from simulator.engine import Simulator
from simulator.late_scan import LateScan
from simulator.pack_memo import Refusal, RefusedPacks
from simulator.releases import ReleaseIndex
from simulator.sharing import ShareIndex
from slurm_plugin.cli.simulate_cmd import simulate


def _gpu(gid: int, end: float) -> SimpleNamespace:
    return SimpleNamespace(id=gid, jobs=[SimpleNamespace(t_end=end)], static=False)


def test_late_scan_keeps_a_kinds_answer_until_a_release_or_group_changes():
    rel, shares = ReleaseIndex(), ShareIndex(1 << 30, 2, multi_on=False)
    gpus = {i: _gpu(i, end) for i, end in enumerate((50.0, 200.0, 300.0))}
    for g in gpus.values():
        rel.touch(g)
    scan = LateScan(rel, shares)
    group = dict.fromkeys(gpus)
    assert scan.late(("k",), group, 100.0) == (1, 50.0)
    assert scan.late(("k",), group, 100.0) == (1, 50.0) and scan.hits == 1
    assert scan.late(("k",), group, 250.0) == (2, 50.0) and scan.scans == 2  # another shadow
    assert scan.first_late(("k",), group, 400.0) is None
    gpus[2].jobs[0].t_end = 120.0  # a change of speed re-files the GPU: the memo is stale
    rel.touch(gpus[2])
    assert scan.late(("k",), group, 250.0) == (None, 50.0)
    shares.changes += 1  # a GPU filed or taken out of a group
    del group[0]
    assert scan.late(("k",), group, 250.0) == (None, 120.0)
    assert scan.scans == 5


class _Kinds:
    """The job's co-runner memo (NewcomerMemo) as a refusal reads it: itself (by identity), the
    answer of the kind it ranks first and the version of its qualifying kinds."""

    def __init__(self) -> None:
        self.live_version = 0
        self.top = object()

    def best(self) -> object:
        return self.top


def _new_first(s, job) -> None:
    s.kinds.top = object()
    s.kinds.live_version += 1


def _memo():
    know = SimpleNamespace(version=0)
    releases, shares = ReleaseIndex(), ShareIndex(1 << 30, 2, multi_on=False)
    avoid, history, idle = set(), set(), {}
    memo = RefusedPacks(rules=None, sched=None, gpus=4, releases=releases, shares=shares, know=know,
                        avoid=avoid, history=history, idle=idle)
    kinds = _Kinds()
    return memo, SimpleNamespace(releases=releases, shares=shares, know=know, avoid=avoid, history=history,
                                 idle=idle, kinds=kinds)


STRICT = SimpleNamespace(pack_ok=False, shadow=1000.0)  # a reservation to honour
CHANGES = {  # what any refused try rests on
    "another kind ranked first, or a new answer for it (a pair learned or avoided)": _new_first,
    "a new co-runner memo (a refit, another decision)": lambda s, job: setattr(s, "kinds", _Kinds()),
    "a workload with a history": lambda s, job: s.history.add(3),
    "the job restarted": lambda s, job: setattr(job, "token", job.token + 1),
    "the job remembers a bigger size": lambda s, job: setattr(job, "remembered", 1 << 30),
    "a GPU idle": lambda s, job: s.idle.__setitem__(0, None),
}
TIME_TESTS = {  # what a try that honoured a reservation rests on besides
    "a start, end, stop or change of speed": lambda s: setattr(s.releases, "stamp", s.releases.stamp + 1),
    "a group of busy GPUs changed": lambda s: setattr(s.shares, "changes", s.shares.changes + 1),
}


def _refusal(memo, job, bf, group, gpu, kinds):
    shadow = memo.shadow_of(bf)
    return Refusal(memo.state(job, kinds), shadow, None if shadow is None else memo.strict(), group, gpu, 0.9, (0.8,),
                   kinds.best(), kinds.live_version)


@pytest.mark.parametrize("bf", [None, STRICT], ids=["nothing to honour", "a reservation"])
@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_a_refused_try_is_forgotten_when_what_it_rests_on_changes(change, bf):
    memo, s = _memo()
    job, gpu = SimpleNamespace(id=7, token=0, remembered=0), SimpleNamespace(id=4)
    group = {4: None, 5: None}
    memo.keep(job, _refusal(memo, job, bf, group, gpu, s.kinds))
    assert memo.take(job, memo.state(job, s.kinds), bf) is not None  # the same state: the same choice
    memo.keep(job, _refusal(memo, job, bf, group, gpu, s.kinds))
    CHANGES[change](s, job)
    assert memo.take(job, memo.state(job, s.kinds), bf) is None
    assert len(memo) == 0  # taken out either way


UNREAD = {  # what changes no refused choice by itself (the co-runner memo's version says when it does)
    "a kind of busy GPU appeared or went": lambda s: setattr(s.shares, "version", s.shares.version + 1),
    "a pair learned elsewhere": lambda s: setattr(s.know, "version", s.know.version + 1),
    "a pair to avoid elsewhere": lambda s: s.avoid.add(("a", "b")),
}


def _kept(bf):
    """A refused try of job 7 on GPU 4 (with ``bf`` to honour) kept in a fresh memo."""
    memo, s = _memo()
    job = SimpleNamespace(id=7, token=0, remembered=0)
    memo.keep(job, _refusal(memo, job, bf, {4: None}, SimpleNamespace(id=4), s.kinds))
    return memo, s, job


@pytest.mark.parametrize("change", UNREAD, ids=list(UNREAD))
def test_a_refusal_stands_while_its_co_runner_memo_does(change):
    memo, s, job = _kept(None)
    UNREAD[change](s)
    assert memo.take(job, memo.state(job, s.kinds), None) is not None


def test_a_kind_ranked_after_the_chosen_one_matters_only_to_a_reservation():
    """With nothing to honour the rule takes the kind ranked first; with a reservation it walked
    the ranking, so any change to the qualifying kinds (``live_version``) may change its choice."""
    memo, s = _memo()
    job, gpu = SimpleNamespace(id=7, token=0, remembered=0), SimpleNamespace(id=4)
    for bf, stands in ((None, True), (STRICT, False)):
        memo.keep(job, _refusal(memo, job, bf, {4: None}, gpu, s.kinds))
        s.kinds.live_version += 1  # a kind that qualifies appeared below the first, or went
        assert (memo.take(job, memo.state(job, s.kinds), bf) is not None) == stands


def test_no_state_without_a_co_runner_memo():
    memo, s = _memo()
    assert memo.state(SimpleNamespace(id=7, token=0, remembered=0), None) is None  # not packed: nothing kept


@pytest.mark.parametrize("change", TIME_TESTS, ids=list(TIME_TESTS))
def test_a_try_that_honoured_a_reservation_is_forgotten_when_a_release_changes(change):
    memo, s, job = _kept(STRICT)
    gpu = SimpleNamespace(id=4)
    TIME_TESTS[change](s)
    assert memo.take(job, memo.state(job, s.kinds), STRICT) is None
    # with nothing to honour the choice is the kind's first GPU, whatever the releases
    memo.keep(job, _refusal(memo, job, None, {4: None}, gpu, s.kinds))
    TIME_TESTS[change](s)
    assert memo.take(job, memo.state(job, s.kinds), None) is not None


def test_the_choice_with_nothing_to_honour_is_the_kinds_first_gpu():
    memo, s = _memo()
    job, gpu = SimpleNamespace(id=7, token=0, remembered=0), SimpleNamespace(id=4)
    group = {4: None, 5: None}
    memo.keep(job, _refusal(memo, job, None, group, gpu, s.kinds))
    del group[4]  # GPU 4 left the kind (its job ended): the rule would choose GPU 5
    group[4] = None
    assert memo.take(job, memo.state(job, s.kinds), None) is None


def test_the_same_reservation_only():
    memo, s = _memo()
    job, gpu = SimpleNamespace(id=7, token=0, remembered=0), SimpleNamespace(id=4)
    for then, now, same in ((STRICT, SimpleNamespace(pack_ok=False, shadow=999.0), False),
                            (STRICT, None, False), (STRICT, SimpleNamespace(pack_ok=True, shadow=1000.0), False),
                            (None, SimpleNamespace(pack_ok=True, shadow=5.0), True), (None, STRICT, False)):
        memo.keep(job, _refusal(memo, job, then, {4: None}, gpu, s.kinds))
        assert (memo.take(job, memo.state(job, s.kinds), now) is not None) == same


def test_the_replay_gives_the_same_answers_without_the_memos(monkeypatch, tmp_path):
    """A loaded cluster with harsh pair speeds, where the admission refuses packs: the memos
    are used, and switching them off (every try made in full) changes nothing."""
    stress = tmp_path / "stress.csv"
    res = CliRunner().invoke(simulate, ["stress-pairs", "--seed", "0", "-o", str(stress)])
    assert res.exit_code == 0, res.output
    specs, profiles, pairs = load_workload("philly", jobs=1500, gpu_memory_bytes=80 << 30, truth=stress)
    cfg = SimConfig(policy="colocate", gpus=40, gpu_model="H100-80GB", predictor=True, pair_knowledge="observed")
    sim = Simulator(cfg, specs, profiles, pairs)
    with_memo = summary(sim.run())
    assert sim.policy.refusals.hits > 0 and sim.policy.late.hits > 0
    monkeypatch.setattr(RefusedPacks, "take", lambda self, job, state, bf: None)
    monkeypatch.setattr(LateScan, "first_late", _first_uncached)
    monkeypatch.setattr(LateScan, "earliest", _earliest_uncached)
    without = summary(Simulator(cfg, specs, profiles, pairs).run())
    with_memo.pop("sim_wall_s"), without.pop("sim_wall_s")
    assert with_memo == without


def _first_uncached(self, key, gids, shadow):
    return next((g for g in gids if self.releases.of[g] > shadow), None)


def _earliest_uncached(self, key, gids):
    return min(self.releases.of[g] for g in gids)
