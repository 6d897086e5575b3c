"""Grow by preemption: a packed job that must grow takes shares from younger neighbours.

Design note
-----------
US 9,424,078 (claim 1) makes a *running* job that runs below its maximum resources a
preemptor, like a queued job, with different thresholds: a running preemptor may preempt
*until its maximum* becomes available; a queued preemptor only when it *will have its
minimum* after preempting. Preemptors are taken in order of priority, then time waited.
US 2025/0265126 A1 ([0041], [0076]) puts a preempted job at the *head* of the
queue; it records the pair only for contention, which growth is not.

What this module decides, for the jobs sharing one GPU (Slurm shards or MPS shares):

- **who may grow**: a packed job whose memory forecast says it will outgrow its share, or
  whose remembered size is larger than its share (`grow_request` turns bytes into a
  (minimum, maximum) in shares), or a queued job waiting to come back to its GPU bigger;
- **whom it may evict** (`eligible`): packed jobs on the same GPU that started *after* the
  preemptor (a running one: after it started there; a queued one: after it entered the
  queue, i.e. jobs that overtook it), that may be requeued, and that do not outrank it.
  Never an older job, never a whole-GPU job, never a job that may not be requeued, never
  one that would lose more work than the threshold allows;
- **how many** (`choose_evictions`): youngest first (least work lost: a younger job has
  done less since its start), stopping as soon as the target is met, then every member the
  target does not need is spared again (the one with the most work at stake first), so the
  set is minimal: removing any member leaves the grower short;
- **the thresholds** (`PreemptorThreshold`, one for running and one for queued
  preemptors): running preemptors aim for their maximum and act only when at least their
  minimum is reachable (a restart that still falls short of the forecast would OOM again);
  queued preemptors aim for their minimum, and act only when it is reachable. Each also
  caps evictions per decision and the work a victim may lose, and may wait a while before
  acting (time waited);
- **in which order** (`plan_growth`): preemptors by priority, then by time waited (longer
  first), then job id; a job evicted for one preemptor is gone for the next one; a
  preemptor already evicted does not grow.

The result (`GrowDecision`) names the jobs to requeue (each to the head of the queue,
`pair_recorded=False`), the grower's new share count, and a reason for every step; when
nothing can be done it says why. Shares are fungible here (shards, MPS); a MIG-isolated GPU
passes `fits` (e.g. `mig_fits`) so that only evictions leaving a placeable slice count.
Pure: no clock, no Slurm; the helper's watch and the simulator's policy call the same code.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from mig.fsm import PartitionState, Placement
from mig.policies import choose
from packer.preemption import restart_size

log = logging.getLogger(__name__)

EVICT_KIND = "grow-evict"
RESTART_KIND = "grow-restart"
SKIP_KIND = "grow-skip"


@dataclass(frozen=True)
class Tenant:
    """One job on the GPU, as growth sees it."""

    job_id: int
    started_at: float  # when it started on this GPU
    shares: int  # shares it holds here (a whole-GPU job: the GPU's shares)
    whole_gpu: bool = False
    movable: bool = True  # may be requeued (Slurm's --requeue, not --no-requeue)
    priority: int = 0
    work_since_checkpoint_s: float | None = None  # None: unknown, all work since its start

    def lost_work_s(self, now: float) -> float:
        """Work lost if requeued now: since its last checkpoint, else since its start."""
        if self.work_since_checkpoint_s is not None:
            return max(0.0, self.work_since_checkpoint_s)
        return max(0.0, now - self.started_at)


@dataclass(frozen=True)
class GpuShares:
    """One GPU and the jobs on it (the preemptor included when it runs there)."""

    gpu: str  # e.g. "node3:1"
    total_shares: int
    tenants: tuple[Tenant, ...]

    @property
    def free_shares(self) -> int:
        return max(0, self.total_shares - sum(t.shares for t in self.tenants))

    def tenant(self, job_id: int) -> Tenant | None:
        return next((t for t in self.tenants if t.job_id == job_id), None)

    def without(self, job_ids: Iterable[int]) -> "GpuShares":
        gone = set(job_ids)
        return replace(self, tenants=tuple(t for t in self.tenants if t.job_id not in gone))

    def resized(self, job_id: int, shares: int) -> "GpuShares":
        return replace(self, tenants=tuple(replace(t, shares=shares) if t.job_id == job_id else t
                                           for t in self.tenants))


@dataclass(frozen=True)
class Preemptor:
    """A job that wants more shares on `gpu`.

    Running: it is a tenant of `gpu`; `since` is when it started there. Queued: it waits
    to come back to `gpu` (e.g. requeued for memory); `since` is when it entered the
    queue, and only jobs that started after that (overtook it) may be evicted for it.
    `waiting_since` is when it began to want more (the forecast's warning, the submit)."""

    job_id: int
    gpu: str
    running: bool
    min_shares: int  # the least that is worth a restart (holds the forecast peak)
    max_shares: int  # the most it asks for (forecast upper bound, remembered size)
    since: float
    waiting_since: float
    priority: int = 0
    held_shares: int = 0  # running: its share now
    why: str = ""  # what says it must grow (forecast, remembered size)

    def __post_init__(self) -> None:
        if self.min_shares < 1 or self.max_shares < self.min_shares:
            raise ValueError(f"job {self.job_id}: need 1 <= min_shares <= max_shares, "
                             f"got {self.min_shares}..{self.max_shares}")


@dataclass(frozen=True)
class PreemptorThreshold:
    """When one kind of preemptor (running or queued) may evict.

    `target`: "max" (evict until the maximum is available) or "min" (only the minimum).
    The preemptor acts only when at least its minimum is reachable."""

    enabled: bool = True
    target: str = "max"
    max_evictions: int = 2  # victims per decision
    max_victim_lost_s: float | None = 3600.0  # never evict a job losing more work than this
    min_wait_s: float = 0.0  # act only after wanting more for this long

    def __post_init__(self) -> None:
        if self.target not in ("max", "min"):
            raise ValueError(f"target must be 'max' or 'min', got {self.target!r}")
        if self.max_evictions < 0:
            raise ValueError("max_evictions must be 0 or more")


@dataclass(frozen=True)
class GrowSettings:
    """Separate thresholds for running and queued preemptors (the seed's claim 1)."""

    running: PreemptorThreshold = field(default_factory=PreemptorThreshold)
    queued: PreemptorThreshold = field(default_factory=lambda: PreemptorThreshold(target="min"))
    max_packed_shares: int | None = None  # a packed job never holds more (None: the GPU's shares)
    max_evictions_per_round: int = 4
    rungs: tuple[int, ...] = ()  # the share counts a grower may get (the model's ladder; (): any)

    def threshold(self, p: Preemptor) -> PreemptorThreshold:
        return self.running if p.running else self.queued


@dataclass(frozen=True)
class Eviction:
    """Requeue `job_id` at the head of the queue to make room for the grower."""

    job_id: int
    gpu: str
    shares: int
    lost_work_s: float
    reason: str
    to_head: bool = True
    pair_recorded: bool = False  # growth, not contention: the pair stays packable
    kind: str = EVICT_KIND


@dataclass(frozen=True)
class GrowDecision:
    """What one preemptor gets. `acted` False: nothing to do, `reason` says why."""

    preemptor: int
    gpu: str
    running: bool
    acted: bool
    reason: str
    evictions: tuple[Eviction, ...] = ()
    grower_shares: int | None = None  # the share count it restarts (or starts) with
    steps: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return RESTART_KIND if self.acted else SKIP_KIND

    @property
    def lost_work_s(self) -> float:
        return sum(e.lost_work_s for e in self.evictions)

    @property
    def requeue_order(self) -> tuple[int, ...]:
        """Jobs to requeue, in order: the evicted (youngest first), then a running grower.

        The grower is to restart on the same GPU before the evicted ones start again: its
        head-of-queue priority must be above theirs."""
        if not self.acted:
            return ()
        grower = (self.preemptor,) if self.running else ()
        return (*(e.job_id for e in self.evictions), *grower)


def grow_request(current_shares: int, need_bytes: float, share_bytes: float, max_packed_shares: int,
                 *, upper_bytes: float | None = None, remembered_shares: int | None = None,
                 rungs: Sequence[int] = ()) -> tuple[int, int] | None:
    """(min_shares, max_shares) for a job that must grow, or None when it needs a whole GPU.

    The minimum holds `need_bytes` (the forecast peak), the maximum `upper_bytes` (the
    forecast's upper bound) or the remembered size, whichever is larger; both at least one
    share above the current share (`packer.preemption.restart_size`), the maximum capped at
    what a packed job may hold; with `rungs` (the model's share ladder) both are on it."""
    low = restart_size(current_shares, need_bytes, share_bytes, max_packed_shards=max_packed_shares,
                       partition_shards=rungs)
    if low.whole_gpu:
        return None
    high = low.shards
    if upper_bytes is not None and upper_bytes > need_bytes:
        size = restart_size(current_shares, upper_bytes, share_bytes, max_packed_shards=max_packed_shares,
                            partition_shards=rungs)
        high = max_packed_shares if size.whole_gpu else max(high, size.shards)
    if remembered_shares:
        high = max(high, min(remembered_shares, max_packed_shares))
    return low.shards, _rung_at_most(high, rungs, low.shards)


def _rung_at_most(shares: int, rungs: Sequence[int], floor: int) -> int:
    """The largest of `rungs` not above `shares` and not below `floor` (`shares` when no
    rungs are given: any count)."""
    if not rungs:
        return shares
    return max((k for k in rungs if floor <= k <= shares), default=floor)


def eligible(gpu: GpuShares, p: Preemptor, threshold: PreemptorThreshold, now: float,
             protected: frozenset[int] = frozenset()) -> tuple[list[Tenant], list[str]]:
    """The tenants `p` may evict, youngest first, and why each other tenant is spared.
    `protected`: jobs that grew this round (never undone in the same round)."""
    out: list[Tenant] = []
    spared: list[str] = []
    for t in gpu.tenants:
        if t.job_id == p.job_id:
            continue
        if t.job_id in protected:
            spared.append(f"job {t.job_id} grew this round")
        elif t.whole_gpu:
            spared.append(f"job {t.job_id} holds the whole GPU")
        elif t.started_at <= p.since:
            spared.append(f"job {t.job_id} is older (started {p.since - t.started_at:.0f}s before)")
        elif not t.movable:
            spared.append(f"job {t.job_id} may not be requeued")
        elif t.priority > p.priority:
            spared.append(f"job {t.job_id} outranks it (priority {t.priority} > {p.priority})")
        elif threshold.max_victim_lost_s is not None and t.lost_work_s(now) > threshold.max_victim_lost_s:
            spared.append(f"job {t.job_id} would lose {t.lost_work_s(now):.0f}s of work "
                          f"(> {threshold.max_victim_lost_s:.0f}s)")
        else:
            out.append(t)
    out.sort(key=lambda t: (-t.started_at, t.lost_work_s(now), -t.job_id))
    return out, spared


def choose_evictions(candidates: Sequence[Tenant], base: int, target: int, now: float,
                     fits: Callable[[frozenset[int]], bool] | None = None) -> list[Tenant] | None:
    """The fewest-work set of `candidates` (youngest first) lifting `base` shares to `target`.

    Greedy youngest first until `base + evicted >= target` (and `fits`, when given, accepts
    the set), then each member is spared again if the rest still suffice, the one with the
    most work at stake tried first. None when even all candidates are not enough."""
    ok = fits or (lambda _ids: True)
    chosen: list[Tenant] = []
    got = base
    for t in candidates:
        if got >= target and ok(frozenset(c.job_id for c in chosen)):
            break
        chosen.append(t)
        got += t.shares
    if got < target or not ok(frozenset(c.job_id for c in chosen)):
        return None
    for t in sorted(chosen, key=lambda t: (-t.lost_work_s(now), t.started_at)):
        rest = [c for c in chosen if c is not t]
        if got - t.shares >= target and ok(frozenset(c.job_id for c in rest)):
            chosen = rest
            got -= t.shares
    return chosen


def decide_growth(gpu: GpuShares, p: Preemptor, settings: GrowSettings, now: float,
                  fits: Callable[[frozenset[int]], bool] | None = None,
                  evictions_left: int | None = None, protected: frozenset[int] = frozenset()
                  ) -> GrowDecision:
    """What `p` gets on `gpu` now. `fits(evicted ids)` vetoes sets that free shares the grower
    cannot use (MIG); `evictions_left` is what the round still allows; `protected` jobs
    (those that grew earlier in the round) are not evicted."""
    th = settings.threshold(p)
    kind = "running" if p.running else "queued"

    def skip(reason: str) -> GrowDecision:
        return GrowDecision(p.job_id, gpu.gpu, p.running, False, reason)

    if not th.enabled:
        return skip(f"{kind} preemptors are switched off")
    held = 0
    if p.running:
        me = gpu.tenant(p.job_id)
        if me is None:
            return skip(f"job {p.job_id} does not run on {gpu.gpu}")
        held = me.shares
    cap = min(settings.max_packed_shares or gpu.total_shares, gpu.total_shares)
    low, high = p.min_shares, min(p.max_shares, cap)
    if low > cap:
        return skip(f"needs {low} shares, more than a packed job may hold ({cap}): a whole GPU, "
                    "through the queue")
    if p.running and held >= high:
        return skip(f"already holds {held} shares (asks {low}..{p.max_shares})")
    waited = now - p.waiting_since
    if waited < th.min_wait_s:
        return skip(f"has wanted more for {waited:.0f}s, {kind} preemptors wait {th.min_wait_s:.0f}s")
    base = held + gpu.free_shares
    target = high if th.target == "max" else low
    steps = [f"{kind} preemptor job {p.job_id} on {gpu.gpu}: holds {held}, {gpu.free_shares} free, "
             f"asks {low}..{p.max_shares} shares ({p.why or 'grows'})"]
    if base >= target and (fits is None or fits(frozenset())):
        steps.append(f"{target} shares fit without evicting anyone")
        new = _rung_at_most(min(high, base), settings.rungs, low)
        return GrowDecision(p.job_id, gpu.gpu, p.running, True,
                            f"grows to {new} shares in free room", (), new, tuple(steps))
    cands, spared = eligible(gpu, p, th, now, protected)
    steps += [f"spared: {s}" for s in spared]
    reachable = base + sum(t.shares for t in cands)
    if reachable < low:
        return GrowDecision(p.job_id, gpu.gpu, p.running, False,
                            f"even evicting every younger packed job gives {reachable} shares, fewer than "
                            f"its minimum {low}" + (f" ({'; '.join(spared)})" if spared else ""),
                            steps=tuple(steps))
    target = min(target, reachable)  # a running preemptor stops at what it can reach
    chosen = choose_evictions(cands, base, target, now, fits)
    if chosen is None and target > low:
        target = low
        chosen = choose_evictions(cands, base, target, now, fits)
    if chosen is None:
        return GrowDecision(p.job_id, gpu.gpu, p.running, False,
                            f"no set of younger jobs leaves a placeable {low}-share slice", steps=tuple(steps))
    limit = th.max_evictions if evictions_left is None else min(th.max_evictions, evictions_left)
    if len(chosen) > limit:
        return GrowDecision(p.job_id, gpu.gpu, p.running, False,
                            f"needs {len(chosen)} evictions, the limit is {limit}", steps=tuple(steps))
    got = base + sum(t.shares for t in chosen)
    new = _rung_at_most(min(high, got), settings.rungs, low)
    evictions = []
    for t in chosen:
        lost = t.lost_work_s(now)
        why = (f"younger packed job {t.job_id} (started {t.started_at - p.since:.0f}s after job {p.job_id}) "
               f"frees {t.shares} shares for job {p.job_id} to grow to {new}; loses {lost:.0f}s of work; "
               f"requeued at the head, pair not recorded (growth, not contention)")
        evictions.append(Eviction(t.job_id, gpu.gpu, t.shares, lost, why))
        steps.append(f"evict job {t.job_id}: {why}")
    steps.append(f"job {p.job_id} {'restarts' if p.running else 'starts'} on {gpu.gpu} with {new} shares")
    reason = (f"{kind} preemptor job {p.job_id} grows {held}->{new} shares on {gpu.gpu} by evicting "
              f"{len(evictions)} younger job{'s' if len(evictions) != 1 else ''} "
              f"({sum(e.lost_work_s for e in evictions):.0f}s of work lost)")
    return GrowDecision(p.job_id, gpu.gpu, p.running, True, reason, tuple(evictions), new, tuple(steps))


def preemptor_order(preemptors: Iterable[Preemptor]) -> list[Preemptor]:
    """Priority first, then time waited (longer first), then job id (the seed's claim 1)."""
    return sorted(preemptors, key=lambda p: (-p.priority, p.waiting_since, p.job_id))


def plan_growth(gpus: Sequence[GpuShares], preemptors: Sequence[Preemptor], settings: GrowSettings,
                now: float, fits: Callable[[str, int, frozenset[int]], bool] | None = None
                ) -> list[GrowDecision]:
    """One round: every preemptor in order, each seeing the GPUs as earlier ones left them.

    `fits(gpu, preemptor id, evicted ids)` vetoes sets that leave no placeable slice (MIG).
    Returns one decision per preemptor, in the order they were taken."""
    by_gpu = {g.gpu: g for g in gpus}
    evicted: set[int] = set()
    grown: set[int] = set()
    left = settings.max_evictions_per_round
    out: list[GrowDecision] = []
    for p in preemptor_order(preemptors):
        g = by_gpu.get(p.gpu)
        if p.job_id in evicted:
            out.append(GrowDecision(p.job_id, p.gpu, p.running, False,
                                    "evicted this round for a preemptor before it"))
            continue
        if g is None:
            out.append(GrowDecision(p.job_id, p.gpu, p.running, False, f"GPU {p.gpu} is not known"))
            continue
        gfits = None if fits is None else (lambda ids, _g=g.gpu, _p=p.job_id: fits(_g, _p, ids))
        d = decide_growth(g, p, settings, now, gfits, left, frozenset(grown))
        out.append(d)
        if not d.acted:
            log.debug("job %d: %s", p.job_id, d.reason)
            continue
        grown.add(p.job_id)
        gone = [e.job_id for e in d.evictions]
        evicted.update(gone)
        left -= len(gone)
        g = g.without(gone)
        if p.running:
            g = g.resized(p.job_id, d.grower_shares)
        else:
            g = replace(g, tenants=(*g.tenants, Tenant(p.job_id, now, d.grower_shares, priority=p.priority)))
        by_gpu[g.gpu] = g
    return out


def mig_fits(state: PartitionState, placements: dict[int, Placement], grower: int, profile: str
             ) -> Callable[[frozenset[int]], bool]:
    """A `fits` for a MIG GPU: after freeing the grower's and the evicted jobs' instances
    (`placements`: job id -> its instance), can an instance of `profile` be placed?"""
    def _fits(evicted: frozenset[int]) -> bool:
        s = state
        for job_id in {grower, *evicted}:
            p = placements.get(job_id)
            if p is not None and p in s:
                s = s.free(p.profile, p.start)
        return choose(s, profile, "fsm").start is not None
    return _fits
