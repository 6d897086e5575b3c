"""What one simulator run is asked to do: the policy names and :class:`SimConfig`."""
from __future__ import annotations

from dataclasses import dataclass

from packer.config import PackerConfig
from packer.rules import SuiteRules
from simulator.knowledge import MODES as KNOWLEDGE_MODES
from simulator.recurrence import Recurrence

POLICIES = ("exclusive", "shard-fixed", "mig-static", "lucid-like", "colocate",
            "mig-by-size", "mig-in-order")
BASELINES = ("exclusive", "shard-fixed", "mig-static", "lucid-like")
MIG_DYNAMIC = ("mig-by-size", "mig-in-order")
SHARED = ("shard-fixed", "lucid-like", "colocate")


@dataclass
class SimConfig:
    policy: str
    gpus: int
    gpu_model: str = "A100-80GB"
    predictor: bool = False
    corunner_rule: str = "best-pair"  # colocate: lowest-util | best-fit | best-pair (the co-runner rule)
    # colocate: predict each pack's slowdown from the measured pairs before packing; pack only
    # where the job already there keeps >= 1 - contention_threshold of its speed (else the
    # contention watch would requeue the newcomer) and the newcomer >= min_newcomer_speed. Busy jobs (above
    # the packer's max_util_pct) may then be packed too: the pair decides, not utilisation.
    pair_predict: bool = True
    # what the pair prediction knows (see simulator.knowledge): counters (the rules' pair
    # model, as the live submit path) | observed | model | oracle (the replay's own table:
    # an upper bound)
    pair_knowledge: str = "counters"
    min_newcomer_speed: float = 0.0
    # colocate: most jobs on one GPU (every job there still predicted at >= 1 - threshold
    # of its speed alone, memory under the packer's cap); more than two relies on the
    # product of pair speeds, bounded by the GPU's compute (see _rerate_shared)
    max_jobs_per_gpu: int = 2
    # a job that cannot get its starting memory on a GPU shared without isolation fails
    # this long after it starts (CUDA context and model loading)
    oom_startup_s: float = 60.0
    bf_depth: int = 100  # Slurm's bf_max_job_test
    monitor_s: float = 60.0  # contention is judged this long after a pack
    contention_threshold: float = 0.10
    # colocate's admission (packer.admission via SuiteRules): load-aware (pack when together
    # beats one after the other given the queue; every job kept at >= min_speed) or
    # slowdown-bound (the job there keeps >= 1 - contention_threshold)
    admission: str = "load-aware"
    min_speed: float = 0.5
    shard_jobs_per_gpu: int = 2  # shard-fixed: shares per GPU / shares per job
    mig_static_layout: str | None = None  # a profile (homogeneous) or "P@S,..."; default all smallest
    mig_static_fraction: float = 0.5  # share of GPUs partitioned in mig-static
    lucid_max_label_sum: int = 2
    predictor_samples: int = 50  # memory samples per run of a growing job
    timeline_step_s: float = 600.0
    known_history: bool = False  # every workload has a history from the start (else: learnt)
    # Skip a scheduling pass when nothing it looks at changed since a pass that started
    # nothing, and remember failed job shapes within a pass: identical results, faster.
    fast: bool = True
    packer: PackerConfig | None = None  # default: shares = memory slices of the GPU model
    # colocate (see simulator.growth and .regrouping): a packed job
    # that outgrows its share evicts younger packed neighbours and restarts bigger in place
    grow_preempt: bool = False
    # colocate: move jobs that declared they can be moved to free whole GPUs for the head
    regroup: bool = False
    movable_fraction: float = 0.3  # jobs that declare --requeue --signal=B:USR1@grace
    checkpoint_grace_s: int = 120  # their signal's grace time (the wait for the checkpoint)
    restart_s: float = 60.0  # a moved job's time to resume from its checkpoint
    regroup_moves_per_plan: int = 2
    regroup_moves_per_hour: int = 12
    regroup_retry_s: float = 600.0  # a head that got no plan is looked at again after this
    # Slurm pushes a requeued job's BeginTime back by cred_expire + 1 s (AuthInfo cred_expire,
    # 120 s by default); the helper lifts it once the old run is gone (`[monitor]
    # skip_requeue_delay`, at its next round), so by default a requeued job waits one round
    cred_expire_s: float = 120.0
    skip_requeue_delay: bool = True
    # silent jobs (issue 35): the share of one-GPU jobs whose out-of-memory end is seen only
    # through their output (a framework's text: the job's word, retried like a report) and the
    # share where it is not seen at all (only a measurement at the share's limit is); the rest
    # report it (an opt-in observer). Drawn per job from its id.
    oom_output_share: float = 0.0
    oom_unseen_share: float = 0.0
    # a retry on the job's word (its report or its output, not a measurement at its share's
    # limit) goes back at its own place in the queue (by arrival), as the live helper releases
    # it with the priority Slurm gives it; False: at the head, like every other requeue (the
    # replay's figures before this switch)
    oom_word_own_place: bool = False
    # a site's own rules (`gpupack simulate --config FILE`: its gpupack.toml's [monitor] table,
    # as the helper reads it): restart costs, grow and regroup thresholds. The fields above
    # (the command's flags) still override what they name. None: the suite's defaults.
    site: SuiteRules | None = None
    # colocate: how later jobs of a workload find its history, by identity level
    # (simulator.recurrence; issue 34). None: every job of a profile has an exact history
    # once one of its runs has finished (the replay's legacy model).
    recurrence: Recurrence | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; choose one of {', '.join(POLICIES)}")
        if self.gpus < 1:
            raise ValueError("--gpus must be at least 1")
        if self.bf_depth < 0:
            raise ValueError("--bf-depth must be 0 or more")
        if not 0.0 <= self.mig_static_fraction <= 1.0:
            raise ValueError("--mig-static-fraction must be in [0, 1]")
        if self.max_jobs_per_gpu < 1:
            raise ValueError("--max-jobs-per-gpu must be at least 1")
        if self.pair_knowledge not in KNOWLEDGE_MODES:
            raise ValueError(f"unknown --pair-knowledge {self.pair_knowledge!r}; choose one of "
                             f"{', '.join(KNOWLEDGE_MODES)}")
        if self.corunner_rule == "best-pair" and not self.pair_predict:
            raise ValueError("--corunner best-pair needs the pair prediction (measured pairs)")
        if (self.grow_preempt or self.regroup) and self.policy != "colocate":
            raise ValueError("--grow-preempt and --regroup act on packed jobs: use them with "
                             "--policy colocate")
        if not 0.0 <= self.movable_fraction <= 1.0:
            raise ValueError("--movable-fraction must be in [0, 1]")
        if self.regroup_moves_per_plan < 0 or self.regroup_moves_per_hour < 0:
            raise ValueError("regroup move limits must be 0 or more")

    @property
    def requeue_delay_s(self) -> float:
        """How long a requeued job waits before it may start again: one helper round (1 s)
        when the helper skips Slurm's delay, else cred_expire + 1 s."""
        return 1.0 if self.skip_requeue_delay else self.cred_expire_s + 1.0

    def rules(self, pk: PackerConfig) -> SuiteRules:
        """The decisions this run makes (`packer.rules.SuiteRules`, the helper's): the site's
        rules (or the defaults) with this run's packer settings `pk` and the fields above."""
        return (self.site or SuiteRules()).with_overrides(
            config=pk, corunner_rule=self.corunner_rule, max_jobs_per_gpu=self.max_jobs_per_gpu,
            min_newcomer_speed=self.min_newcomer_speed, contention_threshold=self.contention_threshold,
            admission=self.admission if self.pair_predict else "slowdown-bound",  # pack, requeue on a slowdown
            min_speed=self.min_speed, regroup_moves_per_plan=self.regroup_moves_per_plan,
            regroup_moves_per_hour=self.regroup_moves_per_hour)

    @property
    def label(self) -> str:
        """The policy and its switches, as ``compare --policies`` names them."""
        return (self.policy + ("+pred" if self.predictor else "") + ("+grow" if self.grow_preempt else "")
                + ("+regroup" if self.regroup else ""))
