"""One rule for MIG slices and restart sizes: the node agent and the replay place a job's
slice with the same `SuiteRules.mig_profile`/`mig_slice`, and the live memory watch and the
replay size a restart with the same `SuiteRules.restart_size`.

One recording rules object is handed to both sides; the test checks both asked it and did
what it said, and that a change of the object (another placement policy, another sizing)
turns both sides: if either side places or sizes with code of its own, it fails."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from mig.catalog import load_catalog
from gpus.sim.backend import SimGpuBackend
from packer import comment
from packer.preemption import RestartSize
from packer.rules import SuiteRules
from slurm_plugin.agent.mig_manager import MigManager
from slurm_plugin.agent.state import Assignment
from simulator import SimConfig, SimJobSpec, Simulator
from slurm_plugin.slurm.fake import FAKE_EPOCH
from tests.unit.test_rules_shared import CONFIG, PROFILES, G, PairTable, _monitor, _running

H100 = load_catalog("H100-80GB")


@dataclass(frozen=True)
class Recording(SuiteRules):
    """SuiteRules that keeps the slice and size decisions it gave; `bigger` asks one share
    more of each (a changed rule, for both sides at once)."""

    given: list = field(default_factory=list, compare=False, repr=False)
    bigger: bool = False

    def mig_profile(self, catalog, shards, shares_per_gpu=None):
        p = super().mig_profile(catalog, shards + self.bigger, shares_per_gpu)
        self.given.append(("profile", p.name if p else None))
        return p

    def mig_slice(self, state, profile, idle=()):
        plan = super().mig_slice(state, profile, idle)
        self.given.append(("slice", plan))
        return plan

    def restart_size(self, current_shards, need_bytes, partitions=()):
        size = super().restart_size(current_shards, need_bytes + self.bigger * self.config.share_bytes, partitions)
        self.given.append(("size", size))
        return size


def _given(rules: Recording, kind: str, since: int = 0) -> list:
    return [d for k, d in rules.given[since:] if k == kind]


# ---------------------------------------------------------------------------- MIG slices
def _agent_slices(rules: Recording, shards: tuple[int, ...]) -> list[tuple[str, int]]:
    """The node agent on one simulated H100 in MIG mode places one job per share count."""
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB"])
    manager = MigManager(backend, rules.mig_policy, lambda: [], rules=rules)
    slices = []
    for job_id, k in enumerate(shards, start=1):
        inst = manager.slice_for(Assignment(job_id, "node1", 0, "mig", "", shards=k))
        slices.append((inst.profile, inst.start))
    return slices


def _replayed_slices(rules: Recording, mems: tuple[int, ...]) -> list[tuple[str, int]]:
    """The replay's mig-in-order policy on one H100: jobs of these memories, all at once."""
    specs = [SimJobSpec(i, float(i), 5000.0, 1, 0, m, m) for i, m in enumerate(mems)]
    pairs = PairTable(PROFILES, {(a, b): 0.95 for a in (0, 1) for b in (0, 1)})
    sim = Simulator(SimConfig(policy="mig-in-order", gpus=1, gpu_model="H100-80GB"), specs, PROFILES, pairs,
                    rules=rules)
    assert sim.rules is rules
    res = sim.run()
    return [(j.inst.profile, j.inst.start) for j in sorted(res.jobs, key=lambda j: j.id)]


def test_one_rules_object_places_mig_slices_on_the_agent_and_in_the_replay():
    # three jobs of 1, 1 and 2 shares (10 GiB each): the replay sees their memories
    shards, mems = (1, 1, 2), (8 * G, 8 * G, 18 * G)
    for rules in (Recording(config=CONFIG), Recording(config=CONFIG, bigger=True),
                  Recording(config=CONFIG, mig_policy="first-fit")):
        agent = _agent_slices(rules, shards)
        mark = len(rules.given)
        replayed = _replayed_slices(rules, mems)
        for side, since in ((agent, 0), (replayed, mark)):
            profiles = _given(rules, "profile", since)
            plans = [p for p in _given(rules, "slice", since) if p.feasible]
            assert profiles and plans, "both sides asked the one object"
            assert {p for p, _ in side} <= set(profiles)
            assert set(side) <= {(p.profile, p.start) for p in plans}
        assert [p for p, _ in agent] == [p for p, _ in replayed]
        want = [rules.mig_profile(H100, k).name for k in shards]
        assert [p for p, _ in agent] == want
    # the changed object turned both sides: one share more is a larger slice on each
    assert _agent_slices(Recording(config=CONFIG, bigger=True), (1,))[0][0] == "1g.20gb"
    assert _replayed_slices(Recording(config=CONFIG, bigger=True), (8 * G,))[0][0] == "1g.20gb"


# ---------------------------------------------------------------------------- restart sizes
def _live_restart(tmp_path, rules: Recording) -> int | None:
    """A packed job (one share) whose memory rises 0.3 GiB/s from 2 GiB, restarted by the
    memory watch: the shares its record asks for after the restart."""
    fake, _helper, agent, monitor = _monitor(tmp_path, rules, memory_horizon_s=60)
    _running(fake, 7, "grow", 1, FAKE_EPOCH)
    mark = len(rules.given)
    for t in range(40):
        agent.put(7, FAKE_EPOCH + t, FAKE_EPOCH, mem=int(2 * G + t * 0.3 * G), shards=1)
        monitor.tick()
        if _given(rules, "size", mark):
            break
    return comment.parse(fake.jobs[7].admin_comment).shards


def _replayed_restart(rules: Recording) -> tuple[int, int]:
    """A packed job growing from 4 to 30 GiB beside a steady one: (the bytes it remembers
    after its first predicted restart, its restarts)."""
    pairs = PairTable(PROFILES, {(a, b): 0.95 for a in (0, 1) for b in (0, 1)})
    specs = [SimJobSpec(0, 0.0, 5000.0, 1, 0, 4 * G, 4 * G), SimJobSpec(1, 10.0, 2000.0, 1, 1, 4 * G, 30 * G)]
    sim = Simulator(SimConfig(policy="colocate", gpus=1, known_history=True, predictor=True), specs, PROFILES,
                    pairs, rules=rules)
    sim.memory.remember_bigger = _first_only(sim.memory.remember_bigger)
    res = sim.run()
    job = next(j for j in res.jobs if j.id == 1)
    return sim.memory.first_remembered, job.pred_restarts


def _first_only(remember):
    def wrapped(job):  # a warned restart (an out-of-memory retry is MemoryRestarts.retry_oom)
        remember(job)
        owner = remember.__self__
        if not hasattr(owner, "first_remembered"):
            owner.first_remembered = job.remembered
    return wrapped


def test_one_rules_object_sizes_restarts_live_and_in_the_replay(tmp_path):
    for bigger in (False, True):
        rules = Recording(config=CONFIG, bigger=bigger)
        remembered, restarts = _replayed_restart(rules)
        replayed, mark = _given(rules, "size"), len(rules.given)
        live_shards = _live_restart(tmp_path / str(bigger), rules)
        (live,) = _given(rules, "size", mark)
        assert replayed and restarts >= 1, "both sides asked the one object"
        assert live_shards == live.shards
        assert remembered in {int(s.shards * CONFIG.share_bytes) for s in replayed if s.shards}
    # the changed object asks one share more on both sides than the plain one
    plain, more = Recording(config=CONFIG), Recording(config=CONFIG, bigger=True)
    assert _live_restart(tmp_path / "p", plain) + 1 == _live_restart(tmp_path / "m", more)
    assert _replayed_restart(plain)[0] + CONFIG.share_bytes == _replayed_restart(more)[0]


def test_restart_size_under_mig_rounds_up_to_a_slice():
    rules = SuiteRules(config=CONFIG)
    size = rules.restart_size(2, 2.5 * CONFIG.share_bytes, rules.mig_partitions(H100))
    assert size == RestartSize(4, size.reason)  # 3 shares is no slice: 3g.40gb holds 4
    assert rules.restart_size(2, 2.5 * CONFIG.share_bytes).shards == 3
    assert replace(rules, mig_policy="first-fit").mig_policy == "first-fit"
