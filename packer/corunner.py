"""Which running job a newcomer should share a GPU with (the co-runner rule, after US
2025/0265126 A1), as a pure function.

Rules:

- ``lowest-util``: the GPU whose current memory use is the lowest, so the pack is most
  likely to stay under the cap;
- ``best-fit``: the GPU whose current memory use is the highest that still leaves room for
  the newcomer under the cap (densest packing);
- ``best-pair``: the GPU where the newcomer and the jobs already there are predicted to keep
  the most throughput together (the sum of each job's speed relative to running alone, from
  measured pair speeds: complementary jobs first), then the lowest memory use.

Prediction before packing (optional, ``pair_speed``): given the measured speed of a workload
beside another (``None`` when the pair was never measured), a GPU qualifies only when every
job already on it is predicted to keep at least ``min_corunner_speed`` of its speed (the contention
watch would requeue the newcomer otherwise) and the newcomer at least ``min_newcomer_speed``. An
unmeasured pair falls back to the aggregate utilisation (the same patent, claim 1): below the
GPU's capacity (100 %) both run at full speed, above it each gets capacity / aggregate
(processor sharing); with a utilisation unknown there is no prediction and the GPU
qualifies only when no minimum speed is asked.

A GPU qualifies when its current memory use plus the newcomer's stays at or below
``max_fraction`` (95 %) of its memory, it holds fewer than ``max_jobs_per_gpu`` jobs, and no
job on it forms a pair to avoid with the newcomer (pairs are of *workloads*, i.e. history
fingerprints, order-insensitive). Ties go to the lower utilisation, then the lower GPU id,
so the choice is deterministic.

Inputs are plain dataclasses, so the same function serves the live controller helper (fed
from node-agent samples) and the simulator.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from packer.util_cap import NO_CAP, within_util_cap

RULES = ("lowest-util", "best-fit", "best-pair")


def pair_key(a: str, b: str) -> tuple[str, str]:
    """The order-insensitive key of a pair of workloads."""
    return (a, b) if a <= b else (b, a)


@dataclass(frozen=True)
class RunningJob:
    """A job already running on a GPU, as the node agent sees it now."""

    job_id: str
    workload: str  # history fingerprint (user + name + script)
    mem_bytes: int  # current memory use
    util_pct: float | None = None  # current GPU utilisation, %
    throughput: float | None = None
    started_at: float = 0.0


@dataclass(frozen=True)
class GpuLoad:
    """One GPU and what runs on it."""

    gpu_id: str
    capacity_bytes: int
    jobs: tuple[RunningJob, ...]

    @property
    def used_bytes(self) -> int:
        return sum(j.mem_bytes for j in self.jobs)

    @property
    def util_pct(self) -> float:
        return sum(j.util_pct or 0.0 for j in self.jobs)


@dataclass(frozen=True)
class Newcomer:
    """The queued job to place: what it will need (its packed size, in bytes)."""

    job_id: str
    workload: str
    mem_bytes: int
    util_pct: float | None = None


@dataclass(frozen=True)
class CorunnerChoice:
    """The GPU chosen (None: stay in the queue) and why."""

    gpu_id: str | None
    corunners: tuple[str, ...]
    reason: str
    rule: str

    @property
    def placed(self) -> bool:
        return self.gpu_id is not None


AvoidSet = Collection[tuple[str, str]] | Callable[[str, str], bool]
# speed (relative to alone) of the first workload running beside the second; None: unmeasured
PairSpeed = Callable[[str, str], float | None]


def predicted_speeds(newcomer: Newcomer, gpu: GpuLoad,
                     pair_speed: PairSpeed) -> tuple[float, tuple[float, ...]] | None:
    """(newcomer's speed, each running job's speed) if the newcomer joins ``gpu``.

    With several jobs on the GPU a job's speed is the product of its pair speeds (a running
    job's includes what it already loses to the others there), scaled down when three or
    more would use more than the GPU's compute (sum of utilisation x speed over 100 %). An unmeasured pair is predicted from the aggregate utilisation: ``min(1, 100 / (u1 + u2))``
    for both (full speed below the GPU's capacity, processor sharing above it). None when a
    utilisation needed for that is unknown: no prediction.
    """
    def pair(x_work: str, x_util: float | None, y_work: str, y_util: float | None):
        s = pair_speed(x_work, y_work)
        if s is not None:
            return s
        if x_util is None or y_util is None:
            return None
        total = x_util + y_util
        return 1.0 if total <= 100.0 else 100.0 / total

    new_speed = 1.0
    others = []
    for j in gpu.jobs:
        a = pair(newcomer.workload, newcomer.util_pct, j.workload, j.util_pct)
        b = pair(j.workload, j.util_pct, newcomer.workload, newcomer.util_pct)
        if a is None or b is None:
            return None
        for k in gpu.jobs:  # what j already loses to the others there
            if k is not j:
                c = pair(j.workload, j.util_pct, k.workload, k.util_pct)
                if c is None:
                    return None
                b *= c
        new_speed *= a
        others.append(b)
    if len(gpu.jobs) > 1 and newcomer.util_pct is not None and all(
            j.util_pct is not None for j in gpu.jobs):
        # three or more: no GPU gives more than its compute (sum of util x speed <= 100 %)
        used = (newcomer.util_pct * new_speed
                + sum(j.util_pct * s for j, s in zip(gpu.jobs, others))) / 100.0
        if used > 1.0:
            new_speed /= used
            others = [s / used for s in others]
    return new_speed, tuple(others)


def _avoided(avoid: AvoidSet, a: str, b: str) -> bool:
    if callable(avoid):
        return bool(avoid(a, b))
    return pair_key(a, b) in avoid


def _check_args(rule: str, max_fraction: float, pair_speed: PairSpeed | None) -> None:
    if rule not in RULES:
        raise ValueError(f"unknown co-runner rule {rule!r}; choose one of {', '.join(RULES)}")
    if not 0 < max_fraction <= 1:
        raise ValueError("max_fraction must be in (0, 1], e.g. 0.95")
    if rule == "best-pair" and pair_speed is None:
        raise ValueError("the best-pair rule needs pair_speed (measured pair speeds)")


@dataclass(frozen=True)
class Ranked:
    """A GPU that qualifies for the newcomer, with the speeds predicted there."""

    gpu: GpuLoad
    used_bytes: int
    mine: float
    theirs: tuple[float, ...]
    gain: float | None  # predicted throughput together (None without pair_speed)

    def key(self, rule: str) -> tuple:
        """Sort key of ``rule``: the best GPU first; ties to lower utilisation, then id."""
        g = self.gpu
        if rule == "lowest-util":
            return (self.used_bytes, g.util_pct, g.gpu_id)
        if rule == "best-pair":
            return (-(self.gain or 0.0), self.used_bytes, g.util_pct, g.gpu_id)
        return (-self.used_bytes, g.util_pct, g.gpu_id)


def _assess(newcomer: Newcomer, gpus: Sequence[GpuLoad], max_fraction: float,
            max_jobs_per_gpu: int, avoid: AvoidSet, pair_speed: PairSpeed | None,
            min_corunner_speed: float, min_newcomer_speed: float,
            counts: dict[str, int], max_util_total: float = NO_CAP) -> list[Ranked]:
    """The busy GPUs that qualify, in input order; ``counts`` gets why the others do not."""
    out = []
    for g in gpus:
        if not g.jobs:
            continue
        if len(g.jobs) >= max_jobs_per_gpu:
            counts["full"] += 1
            continue
        if any(_avoided(avoid, newcomer.workload, j.workload) for j in g.jobs):
            counts["avoided"] += 1
            continue
        used = g.used_bytes
        if used + newcomer.mem_bytes > max_fraction * g.capacity_bytes:
            counts["too_big"] += 1
            continue
        if not within_util_cap(newcomer.util_pct, (j.util_pct for j in g.jobs), max_util_total):
            counts["too_busy"] += 1
            continue
        mine, theirs = 1.0, tuple(1.0 for _ in g.jobs)
        gain = None
        if pair_speed is not None:
            pred = predicted_speeds(newcomer, g, pair_speed)
            if pred is None:
                if min_corunner_speed > 0 or min_newcomer_speed > 0:
                    counts["slow"] += 1
                    continue
            else:
                mine, theirs = pred
                # a pair known to make no progress together (speed 0) never qualifies
                if (mine < min_newcomer_speed or min(theirs) < min_corunner_speed
                        or min(mine, *theirs) <= 0.0):
                    counts["slow"] += 1
                    continue
            gain = mine + sum(theirs)
        out.append(Ranked(g, used, mine, theirs, gain))
    return out


def rank_corunners(
    newcomer: Newcomer,
    gpus: Sequence[GpuLoad],
    rule: str = "lowest-util",
    max_fraction: float = 0.95,
    max_jobs_per_gpu: int = 2,
    avoid: AvoidSet = frozenset(),
    pair_speed: PairSpeed | None = None,
    min_corunner_speed: float = 0.0,
    min_newcomer_speed: float = 0.0,
    max_util_total: float = NO_CAP,
) -> list[Ranked]:
    """The GPUs that qualify for ``newcomer``, best first by ``rule``: what
    :func:`choose_corunner` picks from (its choice is the first one ``allow`` accepts).
    ``max_util_total``: the cap on the GPU's summed utilisation (``packer.util_cap``; 0: none)."""
    _check_args(rule, max_fraction, pair_speed)
    counts = {"full": 0, "avoided": 0, "too_big": 0, "slow": 0, "too_busy": 0}
    fits = _assess(newcomer, gpus, max_fraction, max_jobs_per_gpu, avoid, pair_speed,
                   min_corunner_speed, min_newcomer_speed, counts, max_util_total)
    return sorted(fits, key=lambda r: r.key(rule))


def choose_corunner(
    newcomer: Newcomer,
    gpus: Sequence[GpuLoad],
    rule: str = "lowest-util",
    max_fraction: float = 0.95,
    max_jobs_per_gpu: int = 2,
    avoid: AvoidSet = frozenset(),
    pair_speed: PairSpeed | None = None,
    min_corunner_speed: float = 0.0,
    min_newcomer_speed: float = 0.0,
    allow: Callable[[GpuLoad, float, tuple[float, ...]], bool] | None = None,
    max_util_total: float = NO_CAP,
) -> CorunnerChoice:
    """Pick the GPU (and so the co-runners) for ``newcomer`` among busy ``gpus``.

    Only GPUs that already run a job are considered: an idle GPU is the exclusive path, not
    a pack. ``allow(gpu, newcomer_speed, running_speeds)`` may veto a GPU that qualifies
    otherwise (e.g. a scheduler's reservation); speeds are 1.0 without ``pair_speed``.
    Never raises for a valid ``rule``.
    """
    _check_args(rule, max_fraction, pair_speed)
    if not any(g.jobs for g in gpus):
        return CorunnerChoice(None, (), "no-running-job", rule)
    counts = {"full": 0, "avoided": 0, "too_big": 0, "slow": 0, "too_busy": 0}
    qualified = _assess(newcomer, gpus, max_fraction, max_jobs_per_gpu, avoid, pair_speed,
                        min_corunner_speed, min_newcomer_speed, counts, max_util_total)
    fits = [r for r in qualified if allow is None or allow(r.gpu, r.mine, r.theirs)]
    vetoed = len(qualified) - len(fits)
    avoided, full, too_big, slow = (counts[k] for k in ("avoided", "full", "too_big", "slow"))
    if not fits:
        if slow and not (avoided or too_big or full or vetoed):
            reason = "predicted-slowdown"
        elif vetoed and not (avoided or too_big or full or slow):
            reason = "vetoed"
        elif avoided and not too_big and not full:
            reason = "avoided-pair"
        elif full and not too_big and not avoided:
            reason = "gpus-full"
        elif counts["too_busy"] and not (too_big or avoided or full or slow or vetoed):
            reason = f"over-{max_util_total:g}%-util-cap"
        else:
            reason = f"no-fit-under-{max_fraction:.0%}-cap"
        return CorunnerChoice(None, (), reason, rule)
    best = min(fits, key=lambda r: r.key(rule))
    g, used = best.gpu, best.used_bytes
    after = (used + newcomer.mem_bytes) / g.capacity_bytes
    reason = (f"{rule}: {g.gpu_id} at {used / g.capacity_bytes:.0%} memory, "
              f"{after:.0%} with the newcomer (cap {max_fraction:.0%})")
    if best.gain is not None:
        reason += f", predicted throughput {best.gain:.2f} of alone"

    return CorunnerChoice(g.gpu_id, tuple(j.job_id for j in g.jobs), reason, rule)
