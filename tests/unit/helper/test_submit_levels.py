"""The submit stages history-levels and util-cap, on a real store and a published view: a
script that differs from an earlier run only in a value is packed from that run with the
variant's headroom; a demoted level is passed over; a pack is refused where every shared GPU
with room would pass the utilisation cap."""
from __future__ import annotations

from dataclasses import dataclass, field

from packer.config import GIB, PackerConfig
from packer.decision import ClusterView, Decision
from packer.request import Candidate, JobFacts
from packer.rules import SuiteRules
from packer.workload_identity import workload_keys
from store.db import RunRecord, Store
from store.levels import LevelStore
from slurm_plugin.helper.cluster_view import NodeGpus, Snapshot
from slurm_plugin.helper.queue_state import QueueState, SharedGpu, SharedJob
from slurm_plugin.helper.submit_levels import UtilCap, history_levels

SCRIPT = "#!/bin/bash\n#SBATCH --gres=gpu:1\npython3 train.py --lr {lr}\n"
CONFIG = PackerConfig(mode="enforce", gpu_memory_gib=80, shares_per_gpu=8, gpu_model="")  # 10 GiB shares
CAND = Candidate("tres_per_node", None, "22.05")


@dataclass
class Ctx:
    facts: JobFacts
    store: Store
    config: PackerConfig = CONFIG
    request: object = CAND
    cluster: ClusterView = field(default_factory=lambda: ClusterView(0))
    now: float = 1000.0
    estimate: object = None
    remembered_shards: int | None = None
    snapshot: Snapshot | None = None

    @property
    def rules(self) -> SuiteRules:
        return SuiteRules(config=self.config)

    @property
    def fingerprint(self) -> str:
        return self.workload_keys.exact

    @property
    def workload_keys(self):
        return workload_keys(self.facts.user, self.facts.name, self.facts.script)

    def admit(self) -> Decision:
        history, self.remembered_shards = self.store.history(self.fingerprint, self.config.history_window)
        self.estimate = history
        return self.rules.admit(self.request, history, self.cluster, self.fingerprint, self.remembered_shards)


def facts(lr, user="ann"):
    return JobFacts(user=user, name="train", script=SCRIPT.format(lr=lr).encode(), tres_per_node="gres:gpu:1")


def recorded(store, lr, gib, job_id=1, util=40.0, ended=900.0):
    keys = workload_keys("ann", "train", SCRIPT.format(lr=lr))
    LevelStore(store).remember_keys(keys, "ann")
    store.record_run(RunRecord(job_id=job_id, fingerprint=keys.exact, peak_mem_bytes=int(gib * GIB),
                               mean_util_pct=util, ended_at=ended, started_at=ended - 100))
    return keys


def test_a_value_edit_is_packed_from_the_earlier_runs_history_with_the_variants_headroom():
    store = Store()
    recorded(store, "0.01", 8.5)
    ctx = Ctx(facts("0.02"), store)
    before = ctx.admit()
    assert before.verdict == "exclusive" and before.reason == "no-history"
    after = history_levels(before, ctx)
    assert after.verdict == "packed" and after.shards == 2  # 8.5 GiB + 25 %: two 10 GiB shares
    assert "src=history(1) lvl=variant" in after.comment()
    # the exact script itself: its own history, its own headroom; the stage leaves it alone
    same = Ctx(facts("0.01"), store)
    exact = same.admit()
    assert exact.shards == 1 and "lvl=exact" in exact.comment() and history_levels(exact, same) is exact
    # another user's runs are no history of ann's
    bob = Ctx(facts("0.02", user="bob"), store)
    assert history_levels(bob.admit(), bob).reason == "no-history"
    # off: the looser levels are not looked at
    off = Ctx(facts("0.02"), store, config=CONFIG.with_overrides(loosest_history_level="exact"))
    assert history_levels(off.admit(), off).reason == "no-history"


def test_a_demoted_level_is_passed_over_for_the_next_looser_one():
    store = Store()
    keys = recorded(store, "0.01", 8.5)
    levels = LevelStore(store)
    for _ in range(2):
        levels.count_guess("variant", keys.variant, "ann", wrong=True)
    ctx = Ctx(facts("0.02"), store)
    assert history_levels(ctx.admit(), ctx).reason == "no-history"  # shipped: no command level
    ctx = Ctx(facts("0.02"), store, config=CONFIG.with_overrides(loosest_history_level="command"))
    after = history_levels(ctx.admit(), ctx)
    assert after.verdict == "packed" and "lvl=command" in after.comment()
    for _ in range(2):
        levels.count_guess("command", keys.command, "ann", wrong=True)
    assert history_levels(ctx.admit(), ctx).reason == "no-history"  # profiled on a whole GPU


VIEWS = iter(range(1, 1000))


def view(*gpus):
    """A published view (each one newer than the last) with these shared GPUs."""
    shared = tuple(SharedGpu("node1", i, tuple(SharedJob(10 * i + n, fp, shards, None)
                                               for n, (fp, shards) in enumerate(jobs)))
                   for i, jobs in enumerate(gpus))
    return Snapshot((NodeGpus("node1", frozenset({"MIXED"}), len(gpus), frozenset(range(len(gpus)))),), 0, float(next(VIEWS)),
                    queue=QueueState(0, len(gpus), (), shared))


def test_a_pack_is_refused_when_every_gpu_with_room_would_pass_the_util_cap():
    store = Store()
    hot = recorded(store, "0.5", 4, job_id=1, util=70.0)
    warm = recorded(store, "0.7", 4, job_id=2, util=30.0)
    newcomer = recorded(store, "0.9", 4, job_id=3, util=30.0)
    cap = UtilCap()
    off = Ctx(facts("0.9"), store, snapshot=view([(hot.exact, 2)], [(hot.exact, 7)]))
    assert cap(off.admit(), off).verdict == "packed"  # no cap by default
    ctx = Ctx(facts("0.9"), store, snapshot=view([(hot.exact, 2)], [(hot.exact, 7)]),
              config=CONFIG.with_overrides(max_gpu_util_pct=95.0))
    packed = ctx.admit()
    assert packed.verdict == "packed" and packed.estimate.mean_util_pct == 30.0
    refused = cap(packed, ctx)  # 70 + 30 = 100 % on the GPU with room; the other has no room
    assert refused.verdict == "exclusive" and refused.reason == "util-cap" and "reason=util-cap" in refused.comment()
    ctx.snapshot = view([(hot.exact, 2)], [(warm.exact, 2)])  # 30 + 30: under the cap
    assert cap(packed, ctx) is packed
    ctx.snapshot = view([(hot.exact, 2)], [(warm.exact, 2)] * 3)  # 70 + 30 and 90 + 30
    assert cap(packed, ctx).reason == "util-cap"
    ctx.snapshot = view([(warm.exact, 2), ("unknown", 2)])  # an unknown utilisation adds nothing
    assert cap(packed, ctx) is packed
    ctx.snapshot = view([(hot.exact, 2), (warm.exact, 2)])  # 100 + 30
    assert cap(packed, ctx).reason == "util-cap"
    loose = Ctx(facts("0.9"), store, snapshot=ctx.snapshot, config=CONFIG.with_overrides(max_gpu_util_pct=250.0))
    assert cap(packed, loose) is packed
    ctx.cluster = ClusterView(1)  # a whole GPU idle: nothing to refuse
    assert cap(packed, ctx) is packed
    assert newcomer.exact == ctx.fingerprint


def test_through_the_submit_service_the_level_is_in_the_admin_comment():
    from fixed_view import FixedView
    from slurm_plugin.helper.submit_service import SubmitService

    import time

    store = Store()
    recorded(store, "0.01", 8.5, ended=time.time() - 60)
    service = SubmitService(lambda: CONFIG, store, FixedView(ClusterView(0)))
    fields = {"user_name": b"ann", "name": b"train", "script": SCRIPT.format(lr="0.02").encode(),
              "tres_per_node": b"gres:gpu:1"}
    answer = service.answer(fields)
    assert (answer.verdict, answer.rewrite) == ("packed", "gres:shard:2")
    assert "src=history(1) lvl=variant" in answer.admin_comment
    assert answer.fingerprint == workload_keys("ann", "train", SCRIPT.format(lr="0.02")).exact  # its own, as today
