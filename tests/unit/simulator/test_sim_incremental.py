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
    gpus[2].jobs[0].t_end = 120.0  # a change of speed re-files the GPU: the memo is stale
    rel.touch(gpus[2])
    assert scan.late(("k",), group, 250.0) == (None, 50.0)
    shares.changes += 1  # a GPU filed or taken out of a group
    del group[0]
    assert scan.late(("k",), group, 250.0) == (None, 120.0)
    assert scan.scans == 4


def _memo():
    know = SimpleNamespace(version=0)
    releases, shares = ReleaseIndex(), ShareIndex(1 << 30, 2, multi_on=False)
    avoid, history, idle = set(), set(), {}
    memo = RefusedPacks(rules=None, sched=None, gpus=4, releases=releases, shares=shares, know=know,
                        avoid=avoid, history=history, idle=idle)
    return memo, SimpleNamespace(releases=releases, shares=shares, know=know, avoid=avoid, history=history,
                                 idle=idle)


CHANGES = {
    "a start, end, stop or change of speed": lambda s, job: setattr(s.releases, "stamp", s.releases.stamp + 1),
    "a group of busy GPUs changed": lambda s, job: setattr(s.shares, "changes", s.shares.changes + 1),
    "a kind of busy GPU appeared or went": lambda s, job: setattr(s.shares, "version", s.shares.version + 1),
    "a pair learned or the knowledge refitted": lambda s, job: setattr(s.know, "version", s.know.version + 1),
    "a pair to avoid": lambda s, job: s.avoid.add(("a", "b")),
    "a workload with a history": lambda s, job: s.history.add(3),
    "the job restarted": lambda s, job: setattr(job, "token", job.token + 1),
    "the job remembers a bigger size": lambda s, job: setattr(job, "remembered", 1 << 30),
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_a_refused_try_is_forgotten_when_what_it_rests_on_changes(change):
    memo, s = _memo()
    job = SimpleNamespace(id=7, token=0, remembered=0)
    state = memo.state(job, 3, False)
    memo.keep(job, Refusal(state, None, SimpleNamespace(), 0.9, (0.8,)))
    assert memo.take(job, memo.state(job, 3, False)) is not None  # the same state: kept
    memo.keep(job, Refusal(state, None, SimpleNamespace(), 0.9, (0.8,)))
    CHANGES[change](s, job)
    assert memo.take(job, memo.state(job, 3, False)) is None
    assert len(memo) == 0  # taken out either way


def test_a_refused_try_is_not_replayed_elsewhere_in_the_queue_or_with_an_idle_gpu():
    memo, s = _memo()
    job = SimpleNamespace(id=7, token=0, remembered=0)
    memo.keep(job, Refusal(memo.state(job, 3, False), None, SimpleNamespace(), 0.9, (0.8,)))
    assert memo.take(job, memo.state(job, 4, False)) is None  # another place in the queue
    s.idle[0] = None
    assert memo.state(job, 3, False) is None  # a GPU idle: nothing kept or replayed


def test_the_same_reservation_only():
    hit = Refusal((), 1000.0, SimpleNamespace(), 0.9, (0.8,))
    assert RefusedPacks.same_reservation(hit, SimpleNamespace(pack_ok=False, shadow=1000.0))
    assert not RefusedPacks.same_reservation(hit, SimpleNamespace(pack_ok=False, shadow=999.0))
    assert not RefusedPacks.same_reservation(hit, None)
    free = Refusal((), None, SimpleNamespace(), 0.9, (0.8,))
    assert RefusedPacks.same_reservation(free, None)
    assert RefusedPacks.same_reservation(free, SimpleNamespace(pack_ok=True, shadow=5.0))


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
    monkeypatch.setattr(RefusedPacks, "take", lambda self, job, state: None)
    monkeypatch.setattr(LateScan, "late", _late_uncached)
    without = summary(Simulator(cfg, specs, profiles, pairs).run())
    with_memo.pop("sim_wall_s"), without.pop("sim_wall_s")
    assert with_memo == without


def _late_uncached(self, key, gids, shadow):
    of = self.releases.of
    first = next((g for g in gids if of[g] > shadow), None)
    return first, min(of[g] for g in gids)
