"""What is simulated is what runs: the live helper's watches and the simulator's policies
decide through one `packer.rules.SuiteRules`, and act on what it decides.

The real monitor (its watches, a stateful fake Slurm, a scripted agent) and the real
simulator (a two-job trace) are given the same rules object; the object records each
decision it hands out (its own methods, unchanged), and the test checks that both sides
asked it and did what it said, and that changing the object's settings turns both.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from packer.config import PackerConfig
from packer.rules import SuiteRules
from packer.samples import JobSample
from store.db import Store
from slurm_plugin.helper.monitor import Monitor
from slurm_plugin.helper.monitor_settings import MonitorSettings
from simulator import PairTable, SimConfig, SimJobSpec, Simulator, WorkloadProfile, summary
from slurm_plugin.slurm.fake import FAKE_EPOCH, FakeSlurm
from slurm_plugin.slurm.runner import SlurmRunner

G = 1 << 30


@dataclass(frozen=True)
class Recorded(SuiteRules):
    """SuiteRules that keeps a list of the decisions it gave (who asked is the test's business)."""

    given: list = field(default_factory=list, compare=False, repr=False)

    def restart(self, **kw):
        d = super().restart(**kw)
        self.given.append(("restart", d))
        return d

    def contention(self, residents):
        v = super().contention(residents)
        self.given.append(("contention", v))
        return v

    def contention_now(self, sharers):
        v = super().contention_now(sharers)
        self.given.append(("contention", v))
        return v

    def corunners(self, newcomer, gpus, avoid=frozenset(), pair_speed=None):
        r = super().corunners(newcomer, gpus, avoid, pair_speed)
        self.given.append(("corunners", r))
        return r

    def pair_predictor(self, solo, measured):
        p = super().pair_predictor(solo, measured)
        self.given.append(("pair_predictor", p))
        return p


# one configuration both sides can use: the helper's [packer] table for an 80 GiB GPU in 8
# shares (10 GiB each, as the simulator's A100-80GB), busy jobs packable (the pair decides)
CONFIG = PackerConfig(mode="enforce", gpu_memory_gib=80.0, shares_per_gpu=8, gpu_model="", max_util_pct=100.0)
# a restart made so dear that keeping the job always wins; the default prices restart it
KEEP = dict(restart_cost_s=1e7, oom_penalty_s=0.0)


# ---------------------------------------------------------------------------- the live helper
@dataclass
class _Paths:
    socket: Path
    database: Path
    slurm_conf: Path | None = None


class _Helper:
    def __init__(self, tmp_path: Path, config: PackerConfig):
        self.store = Store()
        self._config = config
        self.paths = _Paths(socket=tmp_path / "helper.sock", database=tmp_path / "gpupack.db")

    def config(self) -> PackerConfig:
        return self._config


class _Agent:
    """The scripted node agent: what each job reports this round."""

    def __init__(self):
        self.now: dict[int, JobSample] = {}

    def __call__(self, nodes):
        return list(self.now.values())

    def put(self, job_id, at, started_at, *, mem=G, throughput=None, shards=2):
        self.now[job_id] = JobSample(job_id=job_id, node="node1", gpu_index=0, at=at, mem_bytes=mem,
                                     peak_mem_bytes=mem, throughput=throughput, isolation=f"shard:{shards}",
                                     started_at=started_at)


def _monitor(tmp_path, rules: SuiteRules, **settings):
    fake, helper, agent = FakeSlurm(), _Helper(tmp_path, rules.config), _Agent()
    monitor = Monitor(helper, runner=SlurmRunner(executor=fake), samples=agent, rules=rules,
                      settings=MonitorSettings(skip_requeue_delay=False, **settings), clock=lambda: FAKE_EPOCH)
    assert monitor.rules is rules
    return fake, helper, agent, monitor


def _running(fake, job_id, fp, shards, start):
    fake.submit(job_id=job_id, state="RUNNING", nodes="node1", gres=f"gres:shard:{shards}",
                gres_detail=[f"shard:h100:{shards}(IDX:0)"], start_time=start,
                admin_comment=f"gpupack: packed shard:{shards} fp={fp}")


def _live_warning(tmp_path, rules: Recorded) -> tuple[str, list[str]]:
    """A packed job (one 10 GiB share) whose memory rises 0.3 GiB/s from 2 GiB, until the
    memory watch has judged its warning: the job's state and the memory events."""
    fake, helper, agent, monitor = _monitor(tmp_path, rules, memory_horizon_s=60)
    _running(fake, 7, "grow", 1, FAKE_EPOCH)
    asked = len(_decisions(rules, "restart"))
    for t in range(40):
        agent.put(7, FAKE_EPOCH + t, FAKE_EPOCH, mem=int(2 * G + t * 0.3 * G), shards=1)
        monitor.tick()
        if len(_decisions(rules, "restart")) > asked:
            break
    kinds = [e.kind for e in helper.store.events() if e.kind in ("keep-memory", "restart-memory")]
    return fake.jobs[7].state, kinds


def _live_newcomer(tmp_path, rules: Recorded) -> str:
    """A senior at 20 it/s drops to 15 it/s (25 %) once a newcomer joins its GPU: the
    newcomer's state after the contention watch judged it."""
    fake, helper, agent, monitor = _monitor(tmp_path, rules)
    _running(fake, 1, "aaaa", 2, FAKE_EPOCH)
    for t in range(10):
        agent.put(1, FAKE_EPOCH + t, FAKE_EPOCH, throughput=20.0)
        monitor.tick()
    _running(fake, 2, "bbbb", 2, FAKE_EPOCH + 10)
    for t in range(10, 16):
        agent.put(1, FAKE_EPOCH + t, FAKE_EPOCH, throughput=15.0)
        agent.put(2, FAKE_EPOCH + t, FAKE_EPOCH + 10, throughput=30.0)
        monitor.tick()
    return fake.jobs[2].state


# ---------------------------------------------------------------------------- the simulator
PROFILES = [WorkloadProfile(0, "steady/a", 4 * G, 30.0, 100.0, 0),
            WorkloadProfile(1, "grows/b", 4 * G, 40.0, 100.0, 0)]


def _replay(rules: SuiteRules, *, grows: bool, senior_speed: float = 0.95, **cfg):
    """One GPU: a steady job, then a job packed beside it; growing, its memory rises from
    4 GiB to 30 GiB over its run (its share holds 10 GiB). The senior runs at `senior_speed`
    beside the newcomer."""
    pairs = PairTable(PROFILES, {(0, 0): 0.95, (0, 1): senior_speed, (1, 0): 0.95, (1, 1): 0.95})
    specs = [SimJobSpec(0, 0.0, 5000.0, 1, 0, 4 * G, 4 * G),
             SimJobSpec(1, 10.0, 2000.0, 1, 1, 4 * G, 30 * G if grows else 4 * G)]
    sim = Simulator(SimConfig(policy="colocate", gpus=1, known_history=True, **cfg), specs, PROFILES, pairs,
                    rules=rules)
    assert sim.rules is rules and sim.memory.rules is rules
    res = sim.run()
    return summary(res), {j.id: j for j in res.jobs}


# ---------------------------------------------------------------------------- the tests
def _decisions(rules: Recorded, kind: str, since: int = 0) -> list:
    return [d for k, d in rules.given[since:] if k == kind]


def test_one_rules_object_decides_a_memory_warning_live_and_in_the_replay(tmp_path):
    """Priced to keep, the object keeps both jobs: the live watch logs keep-memory and leaves
    its job running; the replay lets its job run on into its OOM. Priced as by default, the
    same two sides restart."""
    for prices, restarts in ((KEEP, False), ({}, True)):
        rules = Recorded(config=CONFIG, **prices)
        s, jobs = _replay(rules, grows=True, predictor=True)
        replayed, mark = _decisions(rules, "restart"), len(rules.given)
        state, kinds = _live_warning(tmp_path / str(restarts), rules)
        live = _decisions(rules, "restart", mark)
        assert replayed and len(live) == 1, "both sides asked the one object"
        assert {d.restart for d in replayed + live} == {restarts}
        if restarts:
            assert state == "PENDING" and kinds == ["restart-memory"]
            assert s["memory_warnings_restarted"] == len(replayed) and s["memory_warnings_kept"] == 0
            assert jobs[1].pred_restarts == len(replayed) and jobs[1].oom_restarts == 0
        else:
            assert state == "RUNNING" and kinds == ["keep-memory"]
            assert s["memory_warnings_kept"] == len(replayed) and s["memory_warnings_restarted"] == 0
            assert jobs[1].pred_restarts == 0 and jobs[1].oom_restarts >= 1  # kept, it met its OOM


def test_one_rules_object_judges_contention_live_and_in_the_replay(tmp_path):
    """A newcomer that costs its senior 25 %: under a 10 % threshold both sides requeue it,
    under the same object's 30 % neither does."""
    for threshold, requeued in ((0.10, True), (0.30, False)):
        rules = Recorded(config=CONFIG, contention_threshold=threshold, corunner_rule="lowest-util")
        s, jobs = _replay(rules, grows=False, senior_speed=0.75, pair_predict=False,
                          corunner_rule="lowest-util")
        replayed, mark = _decisions(rules, "contention"), len(rules.given)
        state = _live_newcomer(tmp_path / str(threshold), rules)
        live = [v for v in _decisions(rules, "contention", mark) if v is not None]
        assert len(replayed) == 1 and (replayed[0] is not None and replayed[0].newcomer == 1) is requeued
        assert bool(live) is requeued and (jobs[1].preemptions == 1) is requeued
        assert (state == "PENDING") is requeued


def _live_steering(tmp_path, rules: Recorded) -> str:
    """Both GPUs of node1 run workload aaaa, measured at 60 % of its speed beside bbbb; a
    packed bbbb job waits: the nodes it is kept off."""
    fake, helper, _, monitor = _monitor(tmp_path, rules)
    helper.store.pairs.record_pair_speed("aaaa", "bbbb", 0.6)
    for job_id, gpu in ((1, 0), (2, 1)):
        fake.submit(job_id=job_id, state="RUNNING", nodes="node1", gres="gres:shard:2",
                    gres_detail=[f"shard:h100:2(IDX:{gpu})"], start_time=FAKE_EPOCH,
                    admin_comment="gpupack: packed shard:2 fp=aaaa")
    fake.submit(job_id=3, state="PENDING", gres="gres:shard:2", admin_comment="gpupack: packed shard:2 fp=bbbb")
    monitor.tick()
    return fake.jobs[3].excluded_nodes


def test_one_rules_object_ranks_corunners_live_and_in_the_replay(tmp_path):
    """A senior that keeps 60 % of its speed beside the newcomer: under a 10 % threshold the
    replay's colocate does not pack the newcomer beside it and the live steering keeps the
    newcomer off the node where it could only go beside such seniors; under the same
    object's 45 % the replay packs it and the steering lets it go there."""
    for threshold, packs in ((0.10, False), (0.45, True)):
        rules = Recorded(config=CONFIG, contention_threshold=threshold)
        _, jobs = _replay(rules, grows=False, senior_speed=0.6, pair_knowledge="oracle")
        replayed, mark = _decisions(rules, "corunners"), len(rules.given)
        excluded = _live_steering(tmp_path / str(threshold), rules)
        live = _decisions(rules, "corunners", mark)
        assert replayed and live, "both sides asked the one object"
        assert (jobs[1].first_start == 10.0) is packs and bool(replayed[0]) is packs
        assert (excluded == "") is packs and (excluded == "node1") is not packs


# two busy workloads (100 % each: processor sharing says half speed each, 0.5)
BUSY = [WorkloadProfile(0, "steady/a", 4 * G, 100.0, 100.0, 2), WorkloadProfile(1, "grows/b", 4 * G, 100.0, 100.0, 2)]


def _replay_busy(rules: SuiteRules):
    """The steady job runs 5000 s alone; the second arrives at 10 s on the one GPU (truth:
    0.95 each beside the other); the replay predicts with the rules' pair model."""
    pairs = PairTable(BUSY, {(0, 0): 0.95, (0, 1): 0.95, (1, 0): 0.95, (1, 1): 0.95})
    specs = [SimJobSpec(0, 0.0, 5000.0, 1, 0, 4 * G, 4 * G), SimJobSpec(1, 10.0, 2000.0, 1, 1, 4 * G, 4 * G)]
    sim = Simulator(SimConfig(policy="colocate", gpus=1, known_history=True, pair_knowledge="counters"), specs,
                    BUSY, pairs, rules=rules)
    assert sim.know.rules is rules
    return {j.id: j for j in sim.run().jobs}


def _live_submit(rules: SuiteRules) -> str:
    """The same two workloads live: steady/a holds a share of the one GPU with 2 hours of work
    left, no GPU frees for a day; grows/b is submitted packed. The verdict the submit path leaves."""
    from packer.decision import Decision, Estimate
    from store.db import RunRecord
    from slurm_plugin.helper.cluster_view import NodeGpus, Snapshot
    from slurm_plugin.helper.queue_state import QueueState, SharedGpu, SharedJob
    from packer.decision import ClusterView
    from packer.request import JobFacts, NotCandidate
    from slurm_plugin.helper.submit_admission import LoadAwareAdmission
    from slurm_plugin.helper.submit_context import SubmitContext
    from fixed_view import FixedView

    store, now = Store(), FAKE_EPOCH
    for i, fp in enumerate(("steady/a", "grows/b")):
        store.record_run(RunRecord(i + 1, fp, 4 * G, 100.0, started_at=now - 9000, ended_at=now - 100))
    queue = QueueState(waiting=0, gpus=1, releases_s=(86400.0,), shared=(SharedGpu("node1", 0, (
        SharedJob(11, "steady/a", 2, 7200.0),)),))
    snap = Snapshot(nodes=(NodeGpus("node1", frozenset({"MIXED"}), 1, frozenset({0})),), pending_whole_gpu_jobs=0,
                    taken_at=now, queue=queue)
    packed = Decision("packed", "history", 1, Estimate(4 * G, 100.0, 1), "grows/b")
    ctx = SubmitContext(JobFacts(user="u", name="b", script=b""), NotCandidate("packed-by-the-test"), {}, CONFIG,
                        rules, ClusterView(0), now, store, FixedView(ClusterView(0), lambda: snap), "grows/b")
    return LoadAwareAdmission()(packed, ctx).verdict


def test_one_rules_object_predicts_pairs_live_and_in_the_replay():
    """Both sides ask the one object for their pair model and get the same prediction for the
    same counters alone (100 % busy, 4 GiB). An unmeasured pair judged at its mean (0.5, under
    a 0.6 floor) is packed by neither; at its 95 % upper bound (the default) by both."""
    for z, packs in ((0.0, False), (1.96, True)):
        rules = Recorded(config=CONFIG, admission="load-aware", min_speed=0.6, pair_trial_z=z)
        jobs = _replay_busy(rules)
        replayed, mark = _decisions(rules, "pair_predictor"), len(rules.given)
        verdict = _live_submit(rules)
        live = _decisions(rules, "pair_predictor", mark)
        assert replayed and len(live) == 1, "both sides asked the one object"
        r, lv = replayed[0], live[0]
        assert r.predict(0, 0) == lv.predict("steady/a", "steady/a")
        assert r.trial_speed(0, 0) == lv.trial_speed("steady/a", "steady/a") == pytest.approx(0.99 if packs else 0.5)
        assert (jobs[1].first_start == 10.0) is packs
        assert verdict == ("packed" if packs else "exclusive")


SACCT = """JobID|User|JobName|Submit|Start|End|Elapsed|AllocTRES|State
10|alice|train|2024-01-01T00:00:00|2024-01-01T00:00:05|2024-01-01T01:00:05|01:00:00|cpu=4,gres/gpu=1,mem=8G|COMPLETED
11|bob|big|2024-01-01T00:10:00|2024-01-01T00:10:00|2024-01-01T02:10:00|02:00:00|cpu=8,gres/gpu=1|COMPLETED
"""


def test_simulate_config_reads_the_sites_rules_and_flags_still_override(tmp_path):
    """`gpupack simulate --config gpupack.toml` decides with the helper's own reading of the
    file (MonitorSettings.rules with its [packer] table); a flag given wins over it."""
    import json

    from click.testing import CliRunner

    from slurm_plugin.config.toml_file import load_config
    from slurm_plugin.cli.simulate_cmd import simulate
    from slurm_plugin.helper.monitor_settings import load_monitor_settings
    from simulator.workload import default_data_dir

    if default_data_dir() is None:  # the replay's profiles and pairs (workload_profiles.csv), as its siblings
        pytest.skip("needs shared/data/traces or $GPUPACK_DATA_DIR (CI has it)")
    trace = tmp_path / "jobs.txt"
    trace.write_text(SACCT)
    site = tmp_path / "gpupack.toml"
    site.write_text('[packer]\nmode = "enforce"\nmax_util_pct = 75.0\n\n[monitor]\ncontention_threshold = 0.25\n'
                    'restart_cost_s = 120.0\noom_penalty_s = 600.0\nregroup_moves_per_hour = 3\n'
                    'grow_running_max_evictions = 1\n')
    helper_rules = load_monitor_settings(site).rules(load_config(site))
    args = ["--policy", "colocate", "--trace", f"sacct:{trace}", "--gpus", "2", "--json"]

    def run(*extra) -> dict:
        r = CliRunner().invoke(simulate, [*args, *extra])
        assert r.exit_code == 0, r.output
        return json.loads(r.output)

    from slurm_plugin.cli.simulate_cmd import SHIPPED_TOML

    plain, legacy, sited = run()["rules"], run("--settings", "replay-legacy")["rules"], run("--config", str(site))
    # the shipped etc/gpupack.toml's rules by default; the replay's own with its legacy preset;
    # its colocate admits load-aware (the helper has no queue view yet)
    aware = {"admission": "load-aware"}
    assert plain == load_monitor_settings(SHIPPED_TOML).rules(load_config(SHIPPED_TOML)).settings() | aware
    assert legacy == SuiteRules().settings() | {"regroup_moves_per_hour": 12} | aware
    assert sited["rules"] == helper_rules.settings() | aware  # what the helper would decide with
    assert sited["site_config"] == str(site)
    flagged = run("--config", str(site), "--contention-threshold", "0.4", "--regroup-moves-per-hour", "5")["rules"]
    assert flagged == helper_rules.settings() | aware | {"contention_threshold": 0.4, "regroup_moves_per_hour": 5}
    bad = tmp_path / "bad.toml"
    bad.write_text("[monitor]\nrestart_cost = 1\n")
    r = CliRunner().invoke(simulate, [*args, "--config", str(bad)])
    assert r.exit_code != 0 and "unknown [monitor] keys" in r.output
