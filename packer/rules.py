"""The suite's decisions behind one object: :class:`SuiteRules` (what is simulated is what runs).

The live controller helper and the simulator make the same decisions with the same pure
functions; this object holds the settings those functions read (the ``[packer]`` table,
:class:`~packer.config.PackerConfig`, and the decision settings of the ``[monitor]`` table)
and gives one method per decision, each delegating to the existing rule unchanged:

- :meth:`SuiteRules.admit`: exclusive or packed, how many shares (``packer.decision.decide``);
- :meth:`SuiteRules.corunners`: the busy GPUs a packed job may join, best first
  (``packer.corunner.rank_corunners``);
- :meth:`SuiteRules.pack_pays`: whether packing beats waiting, given the queue
  (``packer.admission``, the load-aware rule: ``admission = "load-aware"``, the replay's
  default and the live submit path's (``[monitor] admission``); ``"slowdown-bound"``, the
  default here and the live watches' rule: no job there may lose more than
  ``contention_threshold``);
- :meth:`SuiteRules.judge_pack`: that rule over the GPUs a newcomer could join (the live
  submit path, ``packer.pack_judge``);
- :meth:`SuiteRules.contention` (sampled throughput or counters, the live watch,
  ``packer.contention.find_contention``) and :meth:`SuiteRules.contention_now` (speeds
  already measured, the replay, ``packer.contention.check_contention``): requeue the
  newcomer when a job already there loses more than :attr:`SuiteRules.tolerated_loss`;
  :meth:`SuiteRules.measure` (every senior measured, hurt or not: what the pair knowledge
  learns from, ``packer.contention.measure_seniors``);
- :meth:`SuiteRules.restart`: restart a job whose memory forecast warns, or keep it
  (``predictor.restart.decide_restart``, priced with ``restart_cost_s`` and ``oom_penalty_s``);
- :meth:`SuiteRules.restart_size`: the size a restarted job asks for (``packer.preemption.restart_size``);
- :meth:`SuiteRules.mig_profile`, :meth:`SuiteRules.mig_slice`: a packed job's MIG slice, its
  profile and where it goes on one GPU (``mig.slice_rule``: the node agent's and the replay's);
- :meth:`SuiteRules.grow`: grow by preemption (``packer.grow.plan_growth``);
- :meth:`SuiteRules.regroup`: free whole GPUs for the head (``packer.regroup.plan_regroup``).

The helper builds one from gpupack.toml at start
(``slurm_plugin.helper.monitor_settings.MonitorSettings.rules``); the simulator builds one
from its ``SimConfig`` (``gpupack simulate --config FILE`` reads the same file the same way).
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
import functools
from dataclasses import dataclass, field, replace

from mig.catalog import Catalog, Profile
from mig.fsm import PartitionState, Placement
from mig.policies import POLICIES as MIG_POLICIES
from mig.slice_rule import SlicePlan, partition_shards, place_slice, profile_for_share_count
from packer.admission import AdmissionRule, PackCase, PackJudgement, QueueView, expected_gain, pack_gain
from packer.pair_model import AloneCounters, Prediction
from packer.pair_predictor import TRIAL_Z, PairPredictor
from packer.config import PackerConfig
from packer.contention import (
    ContentionVerdict, PackMeasure, Resident, Sharer, check_contention, find_contention, measure_seniors,
)
from packer.corunner import RULES as CORUNNER_RULES
from packer.corunner import AvoidSet, GpuLoad, Newcomer, PairSpeed, Ranked, rank_corunners
from packer.decision import ClusterView, Decision, Estimate, decide, max_shards
from packer.pack_judge import JudgeSettings, Kinds, judge_pack
from packer.grow import GpuShares, GrowDecision, GrowSettings, Preemptor, PreemptorThreshold, plan_growth
from packer.preemption import RestartSize, restart_size
from packer.regroup import RegroupDecision, plan_regroup
from packer.regroup_budget import MoveBudget
from packer.regroup_model import Cluster, HeadJob
from packer.regroup_plan import RegroupSettings
from packer.request import Candidate, NotCandidate
from packer.util_contention import CounterRule
from predictor.restart import RestartDecision, decide_restart


ADMISSIONS = ("load-aware", "slowdown-bound")


@dataclass(frozen=True)
class SuiteRules:
    """The settings every decision reads, and the decisions. Frozen: one object, one behaviour."""

    config: PackerConfig = field(default_factory=PackerConfig)
    # co-runner choice: the rule, jobs per GPU, and the prediction's floors (a job already
    # there must keep >= 1 - contention_threshold of its speed)
    corunner_rule: str = "best-pair"
    max_jobs_per_gpu: int = 2
    min_newcomer_speed: float = 0.0
    # contention: a senior losing more than this share of its throughput has its newcomer requeued
    contention_threshold: float = 0.10
    settle_s: float = 2.0
    min_samples_before: int = 2
    min_samples_after: int = 2
    counter_z: float = 4.0  # jobs that report nothing: the GPU counters' drop rule
    counter_window: int = 20
    counter_min_samples: int = 8
    # restart on a memory forecast (predictor.restart), priced in seconds of work
    restart_cost_s: float = 60.0
    oom_penalty_s: float = 1800.0
    # grow by preemption and regrouping
    grow_settings: GrowSettings = field(default_factory=lambda: GrowSettings(queued=PreemptorThreshold(
        target="min", max_evictions=1, max_victim_lost_s=600.0, min_wait_s=10.0)))
    regroup_settings: RegroupSettings = field(default_factory=RegroupSettings)
    regroup_moves_per_plan: int = 2
    regroup_moves_per_hour: int = 6
    # admission (packer.admission): "load-aware" packs when together beats one after the
    # other given the queue, every job kept at >= min_speed (fairness, an admin's setting);
    # "slowdown-bound": no job already there may lose more than contention_threshold. The
    # live helper's submit path judges load-aware (`[monitor] admission`, its default) with the
    # published queue; its watches keep the bound (the replay: load-aware)
    admission: str = "slowdown-bound"
    min_speed: float = 0.5
    # an unmeasured pair is judged at its upper bound, mean + pair_trial_z sd (packer.pair_predictor)
    pair_trial_z: float = TRIAL_Z
    # MIG slices (mig.slice_rule): the placement policy of a new slice (mig.policies)
    mig_policy: str = "fsm"

    def __post_init__(self) -> None:
        refuse_bad_settings(self)

    def with_overrides(self, **overrides: object) -> "SuiteRules":
        return replace(self, **overrides)

    def settings(self) -> dict[str, object]:
        """The decision settings (not the [packer] table), flat, for a report."""
        g, r = self.grow_settings.running, self.regroup_settings
        return {"corunner_rule": self.corunner_rule, "max_jobs_per_gpu": self.max_jobs_per_gpu,
                "min_newcomer_speed": self.min_newcomer_speed, "contention_threshold": self.contention_threshold,
                "admission": self.admission, "min_speed": self.min_speed,
                "restart_cost_s": self.restart_cost_s, "oom_penalty_s": self.oom_penalty_s,
                "grow_running_target": g.target, "grow_running_max_evictions": g.max_evictions,
                "grow_running_max_victim_lost_s": g.max_victim_lost_s,
                "regroup_min_gain_ratio": r.min_gain_ratio, "regroup_min_net_s": r.min_net_s,
                "regroup_moves_per_plan": self.regroup_moves_per_plan,
                "regroup_moves_per_hour": self.regroup_moves_per_hour}

    @property
    def max_packed_shares(self) -> int:
        return max_shards(self.config)

    # ------------------------------------------------------------------ admit
    def admit(self, request: Candidate | NotCandidate, estimate: Estimate | None, cluster: ClusterView,
              fingerprint: str | None = None, remembered_shards: int | None = None) -> Decision:
        """Exclusive or packed, and how many shares: ``packer.decision.decide``."""
        return decide(request, estimate, cluster, self.config, fingerprint=fingerprint,
                      remembered_shards=remembered_shards)

    # ------------------------------------------------------------------ co-runner
    def corunners(self, newcomer: Newcomer, gpus: Sequence[GpuLoad], avoid: AvoidSet = frozenset(),
                  pair_speed: PairSpeed | None = None) -> list[Ranked]:
        """The GPUs ``newcomer`` may join, best first: ``packer.corunner.rank_corunners``.
        With ``pair_speed`` (a prediction), a GPU qualifies only where every job keeps at
        least ``min_speed`` (load-aware; whether the pack pays is :meth:`pack_pays`), or
        (slowdown-bound) the job there ``1 - contention_threshold`` of its speed."""
        pred, floors = pair_speed is not None, self.judge_settings
        return rank_corunners(
            newcomer, gpus, rule=self.corunner_rule, max_fraction=self.config.max_gpu_fraction,
            max_jobs_per_gpu=self.max_jobs_per_gpu, avoid=avoid, pair_speed=pair_speed,
            min_corunner_speed=floors.min_corunner_speed if pred else 0.0,
            min_newcomer_speed=floors.min_newcomer_speed if pred else 0.0,
            max_util_total=floors.max_util_total)

    @functools.cached_property
    def judge_settings(self) -> JudgeSettings:
        """What the co-runner ranking with a prediction and the pack judge read, as plain
        data (the judge is given these, never this object)."""
        return JudgeSettings(
            max_fraction=self.config.max_gpu_fraction, max_jobs_per_gpu=self.max_jobs_per_gpu,
            corunner_rule=self.corunner_rule, min_corunner_speed=1.0 - self.tolerated_loss,
            min_newcomer_speed=max(self.min_newcomer_speed, self._fair_floor),
            fairness=self._admission_rule if self.admission == "load-aware" else None,
            max_util_total=self.config.max_gpu_util_pct)

    @property
    def _fair_floor(self) -> float:
        return self.min_speed if self.admission == "load-aware" else 0.0

    @property
    def tolerated_loss(self) -> float:
        """The share of its speed a job there may lose to a newcomer before the contention
        watch requeues the newcomer: ``1 - min_speed`` (load-aware: fairness; throughput is
        :meth:`pack_pays`' business) or ``contention_threshold`` (slowdown-bound)."""
        if self.admission == "load-aware":
            return max(self.contention_threshold, 1.0 - self.min_speed)
        return self.contention_threshold

    def pack_gain(self, case: PackCase, queue: QueueView) -> float:
        """Seconds of completion time the pack saves given the queue: ``packer.admission``."""
        return pack_gain(case, queue)

    def pack_pays(self, case: PackCase, queue: QueueView) -> bool:
        """Pack (or keep a pack) when together beats one after the other given ``queue``
        and every job keeps ``min_speed`` (load-aware); slowdown-bound: the corunner floors
        decided already, and a pair at speed 0 never pays."""
        return self.judge_settings.pays(case, queue)

    def pack_pays_values(self, newcomer_s: float, newcomer_speed: float, residents: Sequence[tuple[float, float]],
                         waiting: int, gpus: int, wait_s: float) -> bool:
        """:meth:`pack_pays` on plain numbers (``residents``: (work left, speed) each, speeds
        in [0, 1]), unchecked: for a caller that judges many packs (the replay's admission)."""
        if self.admission == "load-aware":
            return self._admission_rule.pays_values(newcomer_s, newcomer_speed, residents, waiting, gpus, wait_s)
        return min(newcomer_speed, *(s for _, s in residents)) > 0.0

    def pack_pays_values_fn(self) -> Callable[[float, float, Sequence[tuple[float, float]], int, int, float], bool]:
        """:meth:`pack_pays_values` as one callable, bound once (the load-aware rule's own
        ``pays_values`` when it judges): for a caller that judges millions of packs."""
        return self._admission_rule.pays_values if self.admission == "load-aware" else self.pack_pays_values

    @functools.cached_property
    def _admission_rule(self) -> AdmissionRule:
        return AdmissionRule(self.min_speed)

    def pack_pays_uncertain(self, newcomer_s: float, newcomer: Prediction,
                            residents: Sequence[tuple[float, Prediction]], queue: QueueView) -> bool:
        """Load-aware admission on the pair model's predictions with their spread
        (``packer.pair_model``): fair on the predicted means (``min_speed``), and the
        expected gain over the spread positive (``packer.admission.expected_gain``)."""
        if min(newcomer.mean, *(p.mean for _, p in residents)) < self.min_speed:
            return False
        return expected_gain(newcomer_s, newcomer, residents, queue) > 0.0

    def pair_predictor(self, solo: Mapping[Hashable, AloneCounters],
                       measured: Mapping[tuple[Hashable, Hashable], float]) -> PairPredictor:
        """Pair speeds with their spread from each workload's counters alone and the pairs
        measured (``packer.pair_predictor``), a pack judged at ``trial_speed`` (an unmeasured
        pair at its upper bound, ``pair_trial_z``): what the live submit path and the
        replay's ``counters`` knowledge predict with."""
        return PairPredictor.build(solo, measured, self.pair_trial_z)

    def judge_pack(self, newcomer: Newcomer, newcomer_s: float, gpus: Sequence[GpuLoad] | Kinds,
                   left_s: dict[str, float],
                   queue: QueueView, avoid: AvoidSet, pair_speed: PairSpeed) -> PackJudgement:
        """Whether packing ``newcomer`` now pays on one of the busy ``gpus`` (room under the
        cap on the GPU's total and the jobs-per-GPU limit, no avoided partner, the fairness
        floor, :meth:`pack_pays`): ``packer.pack_judge.judge_pack`` (the live submit path),
        given :attr:`judge_settings`."""
        return judge_pack(self.judge_settings, newcomer, newcomer_s, gpus, left_s, queue, avoid, pair_speed)

    # ------------------------------------------------------------------ contention
    def counter_rule(self) -> CounterRule:
        """The utilisation-drop rule for jobs that report nothing (packer.util_contention)."""
        return CounterRule(threshold=self.contention_threshold, z=self.counter_z, window=self.counter_window,
                           min_before=self.counter_min_samples, min_after=self.counter_min_samples,
                           settle_s=self.settle_s)

    def contention(self, residents: Sequence[Resident]) -> ContentionVerdict | None:
        """The newcomer to requeue on one GPU from its jobs' samples (the live watch):
        ``packer.contention.find_contention``."""
        return find_contention(residents, self.contention_threshold, settle_s=self.settle_s,
                               min_before=self.min_samples_before, min_after=self.min_samples_after,
                               counters=self.counter_rule())

    def measure(self, residents: Sequence[Resident]) -> PackMeasure | None:
        """Every senior of one GPU measured since its newcomer joined, hurt or not (the
        samples ``contention`` judges): ``packer.contention.measure_seniors``."""
        return measure_seniors(residents, settle_s=self.settle_s, min_before=self.min_samples_before,
                               min_after=self.min_samples_after, counters=self.counter_rule())

    def contention_now(self, sharers: Sequence[Sharer]) -> ContentionVerdict | None:
        """The same verdict from speeds already measured (the replay's agent):
        ``packer.contention.check_contention``, which ``find_contention`` ends in."""
        return check_contention(sharers, self.tolerated_loss)

    # ------------------------------------------------------------------ memory restart
    def restart(self, *, now_s: float, checkpoint_s: float, crossing_s: float | None, end_s: float | None,
                predicted_peak_bytes: float, capacity_bytes: float, p_oom: float,
                warn: bool = True) -> RestartDecision:
        """Restart a job whose forecast warns now, or keep it: ``predictor.restart.decide_restart``
        priced with this site's ``restart_cost_s`` and ``oom_penalty_s``."""
        return decide_restart(warn=warn, now_s=now_s, checkpoint_s=checkpoint_s, crossing_s=crossing_s,
                              end_s=end_s, predicted_peak_bytes=predicted_peak_bytes,
                              capacity_bytes=capacity_bytes, restart_cost_s=self.restart_cost_s, p_oom=p_oom,
                              oom_penalty_s=self.oom_penalty_s)

    def restart_size(self, current_shards: int, need_bytes: float,
                     partitions: Sequence[int] = ()) -> RestartSize:
        """The size a job restarts with when it needs ``need_bytes``: ``packer.preemption.restart_size``
        with this config's share and most packed shares; ``partitions``: the share counts a
        slice can hold (MIG: :meth:`mig_partitions`), () for shares."""
        return restart_size(current_shards, need_bytes, self.config.share_bytes, self.max_packed_shares,
                            partitions)

    # ------------------------------------------------------------------ MIG slices
    def mig_profile(self, catalog: Catalog, shards: int, shares_per_gpu: int | None = None) -> Profile | None:
        """The profile of a slice for ``shards`` of ``shares_per_gpu`` shares
        (``mig.slice_rule.profile_for_share_count``). None: the model's share ladder, or with
        no GPU model configured (``[packer] gpu_model = ""``, the replay's scheme) this
        config's share count."""
        if shares_per_gpu is None and not self.config.gpu_model:
            shares_per_gpu = self.config.shares_per_gpu
        return profile_for_share_count(catalog, shards, shares_per_gpu)

    def mig_partitions(self, catalog: Catalog) -> tuple[int, ...]:
        """The share counts a MIG slice of ``catalog`` holds (what a restart rounds up to)."""
        return partition_shards(catalog)

    def mig_slice(self, state: PartitionState, profile: str, idle: Sequence[Placement] = ()) -> SlicePlan:
        """Where ``profile``'s slice goes on one GPU: ``mig.slice_rule.place_slice`` with this
        site's placement policy."""
        return place_slice(state, profile, idle, self.mig_policy)

    # ------------------------------------------------------------------ grow by preemption
    def grow_thresholds(self) -> GrowSettings:
        """The grow thresholds with the most shares a packed job may hold (this config's)."""
        return replace(self.grow_settings, max_packed_shares=self.max_packed_shares, rungs=self.config.rungs)

    def grow(self, gpus: Sequence[GpuShares], preemptors: Sequence[Preemptor], now: float,
             fits: Callable[[str, int, frozenset[int]], bool] | None = None) -> list[GrowDecision]:
        """One round of growth decisions: ``packer.grow.plan_growth``."""
        return plan_growth(gpus, preemptors, self.grow_thresholds(), now, fits)

    # ------------------------------------------------------------------ regrouping
    def move_budget(self, clock: Callable[[], float]) -> MoveBudget:
        """The sliding-hour move budget these limits give (one per helper, one per replay)."""
        return MoveBudget(self.regroup_moves_per_plan, self.regroup_moves_per_hour, clock=clock)

    def regroup(self, cluster: Cluster, head: HeadJob, now: float, budget: MoveBudget | None = None,
                pair_speed: PairSpeed | None = None,
                settings: RegroupSettings | None = None) -> RegroupDecision:
        """The plan that frees whole GPUs for ``head``, or why none: ``packer.regroup.plan_regroup``.
        ``settings``: these rules' thresholds with a view's own limits (the replay has no
        topology: ``allow_idle_targets`` off); None: these rules' own."""
        return plan_regroup(cluster, head, now, settings or self.regroup_settings, budget,
                            max_moves=self.regroup_moves_per_plan, pair_speed=pair_speed)


def refuse_bad_settings(rules: SuiteRules) -> None:
    """Raise ValueError, naming the setting, when one of ``rules``' settings is out of its range
    or names no known rule (an admin's gpupack.toml, a replay's config): never coerced."""
    if rules.admission not in ADMISSIONS:
        raise ValueError(f"admission {rules.admission!r} is not one of {', '.join(ADMISSIONS)}")
    AdmissionRule(rules.min_speed)  # validates it
    if rules.corunner_rule not in CORUNNER_RULES:
        raise ValueError(f"corunner rule {rules.corunner_rule!r} is not one of {', '.join(CORUNNER_RULES)}")
    if rules.max_jobs_per_gpu < 1:
        raise ValueError("max_jobs_per_gpu must be at least 1")
    if not 0 < rules.contention_threshold <= 1:  # 1: nothing is ever requeued (the replay's "off")
        raise ValueError(f"contention_threshold must be a fraction in (0, 1], got {rules.contention_threshold}")
    if rules.restart_cost_s < 0 or rules.oom_penalty_s < 0:
        raise ValueError("restart_cost_s and oom_penalty_s must be >= 0 (seconds)")
    if rules.regroup_moves_per_plan < 0 or rules.regroup_moves_per_hour < 0:
        raise ValueError("regroup move limits must be 0 or more")
    if rules.mig_policy not in MIG_POLICIES:
        raise ValueError(f"MIG placement policy {rules.mig_policy!r} is not one of {', '.join(MIG_POLICIES)}")
