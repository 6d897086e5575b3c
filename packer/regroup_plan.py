"""Regrouping plans: moves, their cost, the head's gain, and the timed list of actions.

Design note: US 10,884,795 costs each regrouping plan by "a resource adjustment cost in the
scheduler and a waiting cost associated with an iteration boundary alignment" (claim 1),
picks the plan with the highest expected gain (claim 4) and runs it as a timed list of
actions, one started when the timer of the one before expires (claim 5). Here:

- a **move** is one job requeued from where it is and restarted elsewhere. It waits for
  its checkpoint first (`Movability.timing`: the signal's grace time, or the next reported
  checkpoint boundary); its *cost* is the work it loses (since its last checkpoint, zero
  when it waits for one), its restart time and the requeue latency, plus the change of its
  predicted run time at the new place (pair speed beside new co-runners, fewer nodes), plus
  the slowdown it brings to jobs already at the new place. All in **JCT-seconds**: seconds
  added to jobs' completion times, the figure average JCT is made of;
- the **gain** is the head job's earlier start: (start without the plan) − (start with it,
  i.e. when the last move's checkpoint wait and requeue are done), in JCT-seconds, plus any
  run time a moved job saves. GPU-seconds are reported beside it (JCT-seconds × the GPUs
  involved) for capacity views;
- a plan runs only when gain > `min_gain_ratio` × cost and gain − cost > `min_net_s`
  (`RegroupPlan.worth_it`); the head's start without the plan is capped at `horizon_s`
  ahead, so "never" does not make every plan look infinitely good.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from packer.corunner import GpuLoad, Newcomer, RunningJob as CorunnerJob, predicted_speeds
from packer.regroup_model import GpuKey, Holding, RunningJob, SignalSpec

UNITS = ("jct", "gpu")
PairSpeed = Callable[[str, str], float | None]


@dataclass(frozen=True)
class RegroupSettings:
    """The planner's knobs (defaults: conservative)."""

    min_gain_ratio: float = 1.5  # gain must beat cost by this factor
    min_net_s: float = 300.0  # and by at least this many seconds
    requeue_s: float = 30.0  # requeue to start again on the new place (Slurm's latency)
    horizon_s: float = 24 * 3600.0  # a head that would "never" start counts as starting this late
    unit: str = "jct"  # what gain and cost are compared in: "jct" seconds or "gpu" seconds
    spread_penalty: float = 0.0  # slowdown per node beyond the fewest a multi-GPU job could use
    allow_idle_targets: bool = True  # a packed job may be moved onto an idle GPU (to free a node)

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {self.unit!r}")
        if self.min_gain_ratio < 1.0:
            raise ValueError("min_gain_ratio must be at least 1 (gain must beat cost)")


@dataclass(frozen=True)
class Move:
    """Requeue `job_id` after its checkpoint and restart it on `to`."""

    job_id: int
    src: tuple[GpuKey, ...]
    to: tuple[Holding, ...]
    wait_s: float  # for its checkpoint
    lost_s: float  # work lost
    restart_s: float
    requeue_s: float
    run_delta_s: float  # its run time at the new place minus here (negative: faster)
    side_delta_s: float  # run time added to the jobs already at the new place
    gpus_used: float
    reason: str

    @property
    def cost_jct_s(self) -> float:
        return self.lost_s + self.restart_s + self.requeue_s + max(0.0, self.run_delta_s) + self.side_delta_s

    @property
    def saved_jct_s(self) -> float:
        return max(0.0, -self.run_delta_s)

    @property
    def cost_gpu_s(self) -> float:
        return self.cost_jct_s * self.gpus_used


@dataclass(frozen=True)
class Action:
    """One timed step of a plan; `kind` is also its event kind."""

    at: float
    kind: str  # regroup-signal | regroup-wait-checkpoint | regroup-requeue | regroup-restart | regroup-head-start
    job_id: int
    target: str
    reason: str
    signal: str | None = None  # regroup-signal: the job's checkpoint signal (e.g. USR1)
    batch_only: bool = False  # regroup-signal: to the batch shell only (--signal=B:...)


@dataclass(frozen=True)
class RegroupPlan:
    kind: str  # consolidate-packed | free-node | compact-multi-gpu | mig-relayout
    head_job: int
    head_target: str  # what the head gets (GPUs, or a MIG instance)
    frees: tuple[GpuKey, ...]
    moves: tuple[Move, ...]
    head_start_without: float
    head_start_with: float
    head_gpus: float
    actions: tuple[Action, ...]
    reason: str
    settings: RegroupSettings

    @property
    def head_gain_s(self) -> float:
        return max(0.0, self.head_start_without - self.head_start_with)

    @property
    def gain_jct_s(self) -> float:
        return self.head_gain_s + sum(m.saved_jct_s for m in self.moves)

    @property
    def cost_jct_s(self) -> float:
        return sum(m.cost_jct_s for m in self.moves)

    @property
    def gain_gpu_s(self) -> float:
        return self.head_gain_s * self.head_gpus + sum(m.saved_jct_s * m.gpus_used for m in self.moves)

    @property
    def cost_gpu_s(self) -> float:
        return sum(m.cost_gpu_s for m in self.moves)

    @property
    def lost_work_s(self) -> float:
        return sum(m.lost_s for m in self.moves)

    def gain(self) -> float:
        return self.gain_jct_s if self.settings.unit == "jct" else self.gain_gpu_s

    def cost(self) -> float:
        return self.cost_jct_s if self.settings.unit == "jct" else self.cost_gpu_s

    @property
    def net(self) -> float:
        return self.gain() - self.cost()

    @property
    def worth_it(self) -> bool:
        s = self.settings
        return self.gain() > s.min_gain_ratio * self.cost() and self.net > s.min_net_s

    def summary(self) -> str:
        u = "JCT-s" if self.settings.unit == "jct" else "GPU-s"
        return (f"{self.kind}: {len(self.moves)} move(s), head job {self.head_job} starts "
                f"{self.head_gain_s:.0f}s earlier; gain {self.gain():.0f} {u} vs cost {self.cost():.0f} {u} "
                f"(lost work {self.lost_work_s:.0f}s)")


def target_text(to: tuple[Holding, ...]) -> str:
    parts = []
    for h in to:
        what = (f" mig:{h.placement}" if h.placement is not None else
                f" shard:{h.shares}" if h.shares is not None else "")
        parts.append(f"{h.node}:{h.index}{what}")
    return ",".join(parts)


def spread_speed(nodes: int, least: int, penalty: float) -> float:
    """Speed of a multi-GPU job over `nodes` nodes relative to `least` (1 when compact)."""
    return 1.0 / (1.0 + max(0.0, penalty) * max(0, nodes - least))


def packed_speeds(job: RunningJob, residents: list[RunningJob], pair_speed: PairSpeed | None
                  ) -> tuple[float, list[float]]:
    """(the job's speed beside `residents`, each resident's new speed), from measured pairs
    (`packer.corunner.predicted_speeds`, unmeasured pairs by utilisation); unchanged speeds
    when nothing can be predicted."""
    if not residents:
        return 1.0, []
    if pair_speed is None:
        return job.speed, [r.speed for r in residents]
    new = Newcomer(str(job.job_id), job.workload, 0, job.util_pct)
    load = GpuLoad("target", 1, tuple(CorunnerJob(str(r.job_id), r.workload, 0, r.util_pct) for r in residents))
    pred = predicted_speeds(new, load, pair_speed)
    if pred is None:
        return job.speed, [r.speed for r in residents]
    mine, theirs = pred
    return mine, [r.speed * s for r, s in zip(residents, theirs)]


def make_move(job: RunningJob, to: tuple[Holding, ...], now: float, settings: RegroupSettings,
              new_speed: float, side_delta_s: float, gpus_used: float, why: str,
              old_speed: float | None = None) -> Move:
    """A move of `job` to `to`; its run time scales by old/new speed (`old_speed`: its
    speed here, default `job.speed`)."""
    wait, lost = job.move.timing(now, job.started_at)
    old = max(1e-6, job.speed if old_speed is None else old_speed)
    run_delta = job.remaining_s * (old / max(1e-6, new_speed) - 1.0)
    return Move(job.job_id, job.gpus, to, wait, lost, job.restart_s, settings.requeue_s, run_delta,
                side_delta_s, gpus_used, why)


def timed_actions(moves: tuple[Move, ...], signals: dict[int, SignalSpec | None], head_job: int,
                  head_target: str, now: float, requeue_s: float) -> tuple[tuple[Action, ...], float]:
    """The plan's actions in time order and when the head starts."""
    acts: list[Action] = []
    ready = now
    for m in moves:
        sig = signals.get(m.job_id)
        if sig is not None:
            acts.append(Action(now, "regroup-signal", m.job_id, target_text(m.to),
                               f"send SIG{sig.signal} to checkpoint; requeue after its {m.wait_s:.0f}s grace time",
                               signal=sig.signal, batch_only=sig.batch_only))
        elif m.wait_s > 0:
            acts.append(Action(now, "regroup-wait-checkpoint", m.job_id, target_text(m.to),
                               f"wait {m.wait_s:.0f}s for its next reported checkpoint"))
        acts.append(Action(now + m.wait_s, "regroup-requeue", m.job_id, target_text(m.to),
                           m.reason + (f"; loses {m.lost_s:.0f}s of work" if m.lost_s else "; nothing lost")))
        acts.append(Action(now + m.wait_s + requeue_s, "regroup-restart", m.job_id, target_text(m.to),
                           f"restarts from its checkpoint (~{m.restart_s:.0f}s to resume)"))
        ready = max(ready, now + m.wait_s + requeue_s)
    acts.append(Action(ready, "regroup-head-start", head_job, head_target,
                       f"job {head_job} starts on the freed room"))
    acts.sort(key=lambda a: (a.at, a.kind != "regroup-signal", a.job_id))
    return tuple(acts), ready


def build_plan(kind: str, head_job: int, head_target: str, frees: tuple[GpuKey, ...], moves: list[Move],
               jobs: dict[int, RunningJob], without: float, head_gpus: float, now: float,
               settings: RegroupSettings, reason: str) -> RegroupPlan:
    mv = tuple(moves)
    signals = {m.job_id: jobs[m.job_id].move.signal for m in mv}
    actions, ready = timed_actions(mv, signals, head_job, head_target, now, settings.requeue_s)
    capped = min(without, now + settings.horizon_s) if math.isfinite(without) else now + settings.horizon_s
    return RegroupPlan(kind, head_job, head_target, frees, mv, capped, ready, head_gpus, actions, reason, settings)
