"""The co-runner memo (simulator.corunner_kinds.NewcomerMemo) when some of its pairs change:
a pair learned or a pair to avoid re-assesses only the kinds of busy GPU holding a partner of
that pair, and ``live_version`` (what a refused pack's memo rests on) moves exactly when what
qualifies, or a qualifying kind's answer, does. Each test would fail on a stale answer."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from packer.corunner import pair_key
from simulator import SimConfig, load_workload
from simulator.corunner_kinds import CorunnerKinds
from simulator.engine import Simulator
from simulator.state import Gpu


class _Speeds:
    """A truth table whose speeds the test sets (the pair learned at that speed)."""

    def __init__(self, table, speeds: dict):
        self.table, self.speeds = table, speeds

    def speed(self, a: int, b: int) -> float:
        return self.speeds.get((a, b), self.table.speed(a, b))


@pytest.fixture(scope="module")
def workload():
    return load_workload("philly", jobs=200, gpu_memory_bytes=80 << 30)


def _sim(workload):
    specs, profiles, pairs = workload
    cfg = SimConfig(policy="colocate", gpus=8, gpu_model="H100-80GB", predictor=True, pair_knowledge="observed")
    sim = Simulator(cfg, specs, profiles, pairs)
    assert not sim.shares.multi_on
    return sim


def _busy(sim, gid: int, profile: int) -> None:
    """GPU ``gid`` runs one small one-GPU job of ``profile`` (filed in the share index)."""
    g = sim.gpus[gid]
    g.jobs = [SimpleNamespace(gpus=1, profile=profile, shards=1, mem0=1 << 30, id=1000 + gid)]
    sim.idle.pop(gid, None)
    sim.shares.add(g)


def _fresh(sim, job, need):
    """What a memo made now from scratch finds: the qualifying kinds and their speeds."""
    kinds = CorunnerKinds(sim.rules, sim.know, sim.avoid, sim.shares, sim.profiles, sim.gpu_mem, True)
    memo = kinds.newcomer(job, need)
    return {k: (memo.qualifies[k].mine, memo.qualifies[k].theirs) for k in kinds.qualifying(memo)}


def _answers(kinds, memo):
    return {k: (memo.qualifies[k].mine, memo.qualifies[k].theirs) for k in kinds.qualifying(memo)}


def _setup(workload):
    """A newcomer of profile 0 and three busy GPUs of profiles 1, 2, 3 that all qualify for it."""
    sim = _sim(workload)
    speeds: dict = {}
    sim.know.truth = _Speeds(sim.know.truth, speeds)
    for gid, prof in enumerate((1, 2, 3)):
        _busy(sim, gid, prof)
    kinds, job, need = sim.policy.kinds, SimpleNamespace(profile=0), 1 << 30
    memo = kinds.newcomer(job, need)
    assert len(kinds.qualifying(memo)) == 3, "the three kinds should qualify for this setup"
    return sim, speeds, kinds, job, need, memo


def test_a_pair_learned_reassesses_only_its_partners_kind(workload):
    sim, speeds, kinds, job, need, memo = _setup(workload)
    version = memo.live_version
    speeds[(0, 1)] = 0.0  # newcomer 0 beside 1: no progress, so kind 1 must stop qualifying
    sim.know.observe(0, 1)
    again = kinds.newcomer(job, need)
    assert again is memo and memo.live_version > version  # refreshed, not rebuilt
    assert {k[0] for k in kinds.qualifying(memo)} == {2, 3}
    assert _answers(kinds, memo) == _fresh(sim, job, need)


def test_a_resident_side_pair_is_read_too(workload):
    sim, speeds, kinds, job, need, memo = _setup(workload)
    speeds[(2, 0)] = 0.0  # the job on GPU 2 beside newcomer 0 would stop: kind 2 goes
    sim.know.observe(2, 0)
    kinds.newcomer(job, need)
    assert {k[0] for k in kinds.qualifying(memo)} == {1, 3}
    assert _answers(kinds, memo) == _fresh(sim, job, need)


def test_a_pair_it_does_not_read_leaves_the_memo_and_its_version(workload):
    sim, speeds, kinds, job, need, memo = _setup(workload)
    before, version = _answers(kinds, memo), memo.live_version
    speeds[(1, 2)] = 0.0
    sim.know.observe(1, 2)  # neither side is the newcomer's workload
    assert kinds.newcomer(job, need) is memo
    assert memo.live_version == version and _answers(kinds, memo) == before == _fresh(sim, job, need)


def test_a_pair_to_avoid_drops_the_partners_kind(workload):
    sim, speeds, kinds, job, need, memo = _setup(workload)
    version = memo.live_version
    sim.avoid.add(pair_key(sim.profiles[3].key, sim.profiles[0].key))
    sim.avoid.add(pair_key(sim.profiles[1].key, sim.profiles[2].key))  # not the newcomer's
    assert kinds.newcomer(job, need) is memo and memo.live_version > version
    assert {k[0] for k in kinds.qualifying(memo)} == {1, 2}
    assert _answers(kinds, memo) == _fresh(sim, job, need)


def test_a_kind_that_does_not_qualify_moves_no_version(workload):
    sim, speeds, kinds, job, need, memo = _setup(workload)
    speeds[(0, 4)] = 0.0
    sim.know.observe(0, 4)  # the newcomer cannot run beside profile 4
    kinds.newcomer(job, need)
    kinds.qualifying(memo)
    version = memo.live_version
    _busy(sim, 5, 4)  # a kind appears that does not qualify for it
    assert len(kinds.qualifying(memo)) == 3 and memo.live_version == version
    _busy(sim, 6, 5)  # one that does: the refusals resting on the memo must go
    assert len(kinds.qualifying(memo)) == 4 and memo.live_version > version


def test_a_refit_makes_a_new_memo(workload):
    sim, speeds, kinds, job, need, memo = _setup(workload)
    sim.know.model_version += 1  # every prediction may have moved
    assert kinds.newcomer(job, need) is not memo


def test_the_kind_ranked_first_follows_its_pairs_and_the_kinds_there(workload):
    """colocate's choice with nothing to honour is the memo's first kind: it must move when that
    kind stops qualifying, and when a kind ranked before it appears."""
    sim, speeds, kinds, job, need, memo = _setup(workload)
    policy = sim.policy
    gid, first = policy._choose(job, 0.0, None, memo)
    best = kinds.kind_of(first.gpu.gpu_id)
    assert first is memo.best() and first is kinds.ranked(memo)[0]
    speeds[(0, best[0])] = 0.0  # the kind it chose stops qualifying
    sim.know.observe(0, best[0])
    kinds.newcomer(job, need)
    kinds.qualifying(memo)
    gid, again = policy._choose(job, 0.0, None, memo)
    assert kinds.kind_of(again.gpu.gpu_id) != best and again is kinds.ranked(memo)[0]
    fresh = CorunnerKinds(sim.rules, sim.know, sim.avoid, sim.shares, sim.profiles, sim.gpu_mem, True)
    fm = fresh.newcomer(job, need)
    fresh.qualifying(fm)
    assert [r.gpu.gpu_id for r in fresh.ranked(fm)] == [r.gpu.gpu_id for r in kinds.ranked(memo)]
    for gid, prof in ((6, 6), (7, 7), (5, best[0])):  # kinds appear; the order is the rule's
        _busy(sim, gid, prof)
        kinds.qualifying(memo)
        fm = fresh.newcomer(job, need)
        fresh.qualifying(fm)
        assert [r.gpu.gpu_id for r in fresh.ranked(fm)] == [r.gpu.gpu_id for r in kinds.ranked(memo)]
        assert memo.best() is kinds.ranked(memo)[0]


def test_no_room_is_forgotten_for_good_once_what_it_rests_on_grew():
    """simulator.no_room.NoRoomMemo: a shape that found no room is skipped while nothing it
    rests on changed; once a count it rests on grew the entry is dropped (that state never
    comes back), so it is never used again, even if another count were to make the sum match."""
    from simulator.no_room import NoRoomMemo
    from simulator.sharing import ShareIndex

    know = SimpleNamespace(version=0, model_version=0, profile_version=[0, 0])
    avoid, history, idle = set(), set(), {}
    memo = NoRoomMemo(know=know, avoid=avoid, history=history, shares=ShareIndex(1 << 30, 2, multi_on=False),
                      idle=idle)
    job = SimpleNamespace(profile=0, remembered=0)
    memo.found_none(job, None)
    assert memo.still_none(job)
    history.add(1)  # a workload gained a history: the packer's decision may differ
    assert not memo.still_none(job)
    know.model_version -= 1  # (a sum that matches again must not revive the stale entry)
    assert not memo.still_none(job)
    memo.found_none(job, None)
    assert memo.still_none(job)
    idle[0] = None
    assert not memo.still_none(job)  # a GPU idle: place decides


def test_the_memo_kept_on_a_queued_job_follows_what_it_rests_on(workload):
    """ColocatePolicy._kinds_for keeps the job's co-runner memo while the histories, the pairs
    to avoid, the pair knowledge and its remembered size stand; each change is seen."""
    sim, speeds, kinds, _job, need, memo = _setup(workload)
    policy = sim.policy
    for gid in list(sim.idle):
        sim.idle.pop(gid)
    job = next(j for j in sim.jobs if j.gpus == 1 and j.profile == 0)
    job.remembered = 0
    first = policy._kinds_for(job)
    assert first is not None and policy._kinds_for(job) is first and len(first.live) == 3
    sim.avoid.add(pair_key(sim.profiles[0].key, sim.profiles[2].key))
    again = policy._kinds_for(job)
    assert {k[0] for k in again.live} == {1, 3}  # the avoided partner's kind went
    speeds[(0, 1)] = 0.0
    sim.know.observe(0, 1)
    assert {k[0] for k in policy._kinds_for(job).live} == {3}
    sim.know.version += 1  # a refit moves version and model_version together
    sim.know.model_version += 1
    assert policy._kinds_for(job) is not again
    job.remembered = 60 << 30  # a bigger remembered size: the packer's decision again
    policy._kinds_for(job)
    assert job.kinds_at[1] == 60 << 30  # decided again for that size
    sim.idle[0] = None
    assert policy._kinds_for(job) is None  # a GPU idle: nothing kept


def test_no_room_lets_place_judge_once_a_kind_that_may_qualify_is_there():
    from simulator.no_room import NoRoomMemo
    from simulator.sharing import ShareIndex

    know = SimpleNamespace(version=0, model_version=0, profile_version=[0, 0, 0, 0])
    shares = ShareIndex(1 << 30, 2, multi_on=False)
    memo = NoRoomMemo(know=know, avoid=set(), history=set(), shares=shares, idle={})
    job = SimpleNamespace(profile=0, remembered=0)
    qualifies = {(2, 1 << 30): False, (3, 1 << 30): True}  # kind (3, 1 GiB) would qualify
    memo.found_none(job, qualifies)
    g2, g3 = Gpu(0), Gpu(1)
    g2.jobs = [SimpleNamespace(gpus=1, profile=2, shards=1, mem0=0)]
    g3.jobs = [SimpleNamespace(gpus=1, profile=3, shards=1, mem0=0)]
    shares.add(g2)
    assert memo.still_none(job)  # a kind that does not qualify: still no room
    shares.add(g3)
    assert not memo.still_none(job)  # one that does: place must judge
    shares.remove(g3)
    g3.jobs = []
    assert not memo.still_none(job)  # the entry went: place judges until it records none again
