"""The `[monitor]` table of gpupack.toml: how the controller helper watches running jobs."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from packer.action_modes import check_action_modes
from packer.config import ConfigError, PackerConfig
from packer.grow import GrowSettings, PreemptorThreshold
from packer.regroup_plan import RegroupSettings
from packer.rules import SuiteRules
from packer.settings_schema import check_fields, setting
from packer.util_contention import CounterRule
from slurm_plugin.config.toml_file import read_table


@dataclass(frozen=True)
class MonitorSettings:
    interval_s: float = setting(1.0, gt=0)  # one round: Slurm, samples, rules, actions
    # at most this share of the time spent in rounds: a long queue (seconds of squeue JSON)
    # stretches the interval instead of keeping the controller machine busy
    max_duty: float = setting(0.25, gt=0, le=1)
    # reading the queue (slurm_plugin/helper/queue_read.py): the whole queue as JSON (every field,
    # finished jobs the rules follow) at least this often, to reconcile the formatted reads with
    queue_reconcile_s: float = setting(300.0, gt=0)
    # where slurmctld answers "did any job change state" cheaply (23.11+, --only-job-state): the
    # formatted queue is read again after a change, after the watcher's own actions, and at
    # least this often (what a field's change that is no state change waits at most)
    queue_refresh_s: float = setting(10.0, gt=0)
    # no run-time action on a view of the queue older than this (slurmctld slow: the rounds
    # stretch; a decision on what Slurm said that long ago is not taken)
    max_view_age_s: float = setting(30.0, gt=0)
    # contention: a newcomer that slows a senior is requeued
    contention_threshold: float = setting(0.10, gt=0, lt=1)  # a senior losing more than this share of its throughput
    settle_s: float = setting(2.0, ge=0)  # samples this soon after the newcomer started are not compared
    min_samples_before: int = setting(2, ge=1)
    min_samples_after: int = setting(2, ge=1)
    # contention of jobs that report nothing, from the GPU's utilisation counters
    # (packer.util_contention; chosen with `gpupack simgpu counters-bench`): the drop must
    # exceed counter_z standard errors of the noise, over at most counter_window rounds a
    # side and at least counter_min_samples rounds a side
    counter_z: float = setting(4.0, gt=0)
    counter_window: int = setting(20, ge=2)
    counter_min_samples: int = setting(8, ge=2)
    # memory growth: forecast to this many seconds after the job started
    memory_horizon_s: float = setting(3600.0, gt=0)
    # the time an action on a memory forecast takes (the sample's age, the requeue, the run
    # ending); a rise that looks like the job loading its working set is extrapolated this
    # far beyond the next round (the last round and its pause), not further: predictor.forecast
    memory_act_s: float = setting(3.0, ge=0)
    # a restart is priced in work (predictor.restart): the time to get a requeued job running
    # again, and what an out-of-memory failure costs beyond that (its user resubmits it)
    restart_cost_s: float = setting(60.0, ge=0)
    oom_penalty_s: float = setting(1800.0, ge=0)
    # a packed job that ran out of memory in its share is requeued bigger (restart-oom) at most
    # this many times, and its workload (fingerprint) at most this many times a day
    oom_retries_per_job: int = setting(2, ge=0)
    oom_retries_per_workload: int = setting(4, ge=0)
    # skip Slurm's requeue delay (BeginTime = requeue + cred_expire) once the old run is
    # fully gone (not COMPLETING): the old launch credential can no longer start anything
    skip_requeue_delay: bool = True
    # admission (packer.admission, the replay's colocate): "load-aware" packs a job at submit
    # only where running it beside the jobs there beats waiting for a whole GPU, given the
    # queue, every job kept at >= min_speed of its speed (the admin's fairness floor);
    # "slowdown-bound": the older rule (no job there may lose more than contention_threshold)
    admission: str = setting("load-aware", choices=("load-aware", "slowdown-bound"))
    min_speed: float = setting(0.5, gt=0, le=1)
    max_jobs_per_gpu: int = setting(2, ge=1)  # packed jobs on one GPU (the replay's limit)
    # the Slurm 22.05 gpu+shard collision guard (fixed upstream in 23.11.5): "auto" runs it
    # only on releases that double-book a GPU, or true / false
    quirk_guard: bool | str = setting("auto", choices=("auto", True, False))
    # steering by pair prediction (the simulator's colocate with --pair-knowledge observed):
    # a pending packed job is kept off a node whose every GPU it could land on is busy with
    # packed jobs and none qualifies, a job there predicted to keep < 1 - contention_threshold
    # of its speed (measured pair speeds, else the feature model on the jobs' history)
    pair_predict: bool = True
    # grow by preemption (packer.grow): a packed job that must grow requeues
    # younger packed neighbours on its GPU. Running preemptors (a running job whose forecast
    # warns or whose remembered size is above its share) evict until their maximum ("max")
    # or only their minimum ("min"); queued preemptors (a grower requeued to restart bigger
    # that newer jobs overtook on its GPU) have thresholds of their own
    grow_running_target: str = setting("max", choices=("max", "min"))
    grow_running_max_evictions: int = setting(2, ge=0)  # victims per decision
    grow_running_max_victim_lost_s: float = setting(3600.0, ge=0)  # never evict a job that ran longer than this
    grow_running_min_wait_s: float = setting(0.0, ge=0)  # act only after wanting more for this long
    grow_queued_target: str = setting("min", choices=("max", "min"))
    grow_queued_max_evictions: int = setting(1, ge=0)
    grow_queued_max_victim_lost_s: float = setting(600.0, ge=0)
    grow_queued_min_wait_s: float = setting(10.0, ge=0)
    grow_max_evictions_per_round: int = setting(4, ge=0)
    # an evicted job stays held until its grower runs again, at most this long
    grow_hold_victims_s: float = setting(120.0, ge=0)
    # regrouping (packer.regroup): a whole-GPU head of the queue waiting while
    # the room exists in pieces gets GPUs freed by moving packed jobs that declared they can
    # be moved (--requeue and a checkpoint signal --signal=B:USR1@T in their script, or a
    # partition / QOS listed here); bounded per plan and per sliding hour, and only when the
    # head's earlier start beats the moves' cost by min_gain_ratio and min_net_s
    regroup_moves_per_plan: int = setting(2, ge=0)
    regroup_moves_per_hour: int = setting(6, ge=0)
    regroup_partitions: list[str] = field(default_factory=list)
    regroup_qos: list[str] = field(default_factory=list)
    regroup_min_gain_ratio: float = setting(1.5, gt=0)
    regroup_min_net_s: float = setting(300.0, ge=0)
    regroup_head_wait_s: float = setting(30.0, ge=0)  # a head waiting less long than this is left to Slurm
    regroup_remaining_s: float = setting(3600.0, gt=0)  # a running job's remaining time when it has no time limit
    # a regroup decision was right when the head started by the plan's expected start plus
    # this (Slurm starts a waiting job at its next scheduling pass: backfill runs every 30 s)
    regroup_start_slack_s: float = setting(30.0, ge=0)
    # memory curves of ended runs kept per workload (fingerprint) for the web view and
    # `gpupack history show`; older ones are pruned, 0 keeps none
    curves_per_fingerprint: int = setting(20, ge=0)
    # MPS percentages from measured utilisation
    mps_headroom: float = setting(0.10, ge=0, le=1)
    mps_floor_pct: int = setting(5, ge=0, le=100)
    # a GPU's MPS plan changes only when a job's share moves by this many points (or its jobs change)
    mps_replan_points: int = setting(5, ge=1, le=100)
    # MIG layouts that follow the queue: in-order (FIFO), by-size, or off
    mig_layout: str = setting("in-order", choices=("in-order", "by-size", "off"))
    # `[monitor.actions]`: per run-time action (requeue-contention, restart-memory, grow-preempt,
    # regroup) off, shadow or enforce; an action not named follows `mode` (enforce in enforce mode, else shadow)
    actions: dict[str, str] = field(default_factory=dict)

    def counter_rule(self) -> CounterRule:
        """The utilisation-drop rule for jobs that report nothing (packer.util_contention)."""
        return CounterRule(threshold=self.contention_threshold, z=self.counter_z, window=self.counter_window,
                           min_before=self.counter_min_samples, min_after=self.counter_min_samples,
                           settle_s=self.settle_s)

    def __post_init__(self) -> None:
        check_fields(self, "monitor")
        if self.counter_window < self.counter_min_samples:
            raise ConfigError(f"[monitor] counter_window = {self.counter_window} is not allowed: at least "
                              f"counter_min_samples ({self.counter_min_samples})")
        check_action_modes(self.actions)
        try:
            self.grow_settings()
        except ValueError as exc:
            raise ConfigError(f"[monitor] grow_*: {exc}") from exc
        self._check_regroup()

    def _check_regroup(self) -> None:
        for key in ("regroup_partitions", "regroup_qos"):
            if not all(getattr(self, key)):
                raise ConfigError(f'[monitor] {key} = {getattr(self, key)} is not allowed: a list of names, '
                                  'e.g. ["preemptible"]')
        try:
            self.regroup_settings()
        except ValueError as exc:
            raise ConfigError(f"[monitor] regroup_*: {exc}") from exc

    def rules(self, config: PackerConfig) -> SuiteRules:
        """The decisions with this table's settings and `config` (the `[packer]` table): the
        object the helper's watches decide through, and `gpupack simulate --config` too."""
        return SuiteRules(
            config=config, contention_threshold=self.contention_threshold, settle_s=self.settle_s,
            min_samples_before=self.min_samples_before, min_samples_after=self.min_samples_after,
            counter_z=self.counter_z, counter_window=self.counter_window,
            counter_min_samples=self.counter_min_samples, restart_cost_s=self.restart_cost_s,
            oom_penalty_s=self.oom_penalty_s, grow_settings=self.grow_settings(),
            regroup_settings=self.regroup_settings(), regroup_moves_per_plan=self.regroup_moves_per_plan,
            regroup_moves_per_hour=self.regroup_moves_per_hour, admission=self.admission,
            min_speed=self.min_speed, max_jobs_per_gpu=self.max_jobs_per_gpu)

    def regroup_settings(self) -> RegroupSettings:
        """The planner's thresholds (`packer.regroup_plan.RegroupSettings`)."""
        return RegroupSettings(min_gain_ratio=self.regroup_min_gain_ratio, min_net_s=self.regroup_min_net_s)

    def grow_settings(self, max_packed_shares: int | None = None) -> GrowSettings:
        """The running and queued preemptor thresholds for `packer.grow.plan_growth`."""
        def threshold(kind: str) -> PreemptorThreshold:
            return PreemptorThreshold(target=getattr(self, f"grow_{kind}_target"),
                                      max_evictions=getattr(self, f"grow_{kind}_max_evictions"),
                                      max_victim_lost_s=getattr(self, f"grow_{kind}_max_victim_lost_s"),
                                      min_wait_s=getattr(self, f"grow_{kind}_min_wait_s"))
        return GrowSettings(running=threshold("running"), queued=threshold("queued"),
                            max_packed_shares=max_packed_shares,
                            max_evictions_per_round=self.grow_max_evictions_per_round)


MOVED_MONITOR_KEYS = {"metrics_port": "moved to the [metrics] table (watch_port; address, submit_port): "
                                      "see docs/operations.md"}


def load_monitor_settings(path: Path | None) -> MonitorSettings:
    return MonitorSettings(**read_table(path, "monitor", MonitorSettings, MOVED_MONITOR_KEYS))
