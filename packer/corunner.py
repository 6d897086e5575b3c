"""Which running job a newcomer should share a GPU with (FIG. 3 of the patent seed, blocks
325-345), as a pure function.

Rules:

- ``lowest-util``: the GPU whose current memory use is the lowest, so the pack is most
  likely to stay under the cap;
- ``best-fit``: the GPU whose current memory use is the highest that still leaves room for
  the newcomer under the cap (densest packing).

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

RULES = ("lowest-util", "best-fit")


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


def _avoided(avoid: AvoidSet, a: str, b: str) -> bool:
    if callable(avoid):
        return bool(avoid(a, b))
    return pair_key(a, b) in avoid


def choose_corunner(
    newcomer: Newcomer,
    gpus: Sequence[GpuLoad],
    rule: str = "lowest-util",
    max_fraction: float = 0.95,
    max_jobs_per_gpu: int = 2,
    avoid: AvoidSet = frozenset(),
) -> CorunnerChoice:
    """Pick the GPU (and so the co-runners) for ``newcomer`` among busy ``gpus``.

    Only GPUs that already run a job are considered: an idle GPU is the exclusive path, not
    a pack. Never raises for a valid ``rule``.
    """
    if rule not in RULES:
        raise ValueError(f"unknown co-runner rule {rule!r}; choose one of {', '.join(RULES)}")
    if not 0 < max_fraction <= 1:
        raise ValueError("max_fraction must be in (0, 1], e.g. 0.95")
    busy = [g for g in gpus if g.jobs]
    if not busy:
        return CorunnerChoice(None, (), "no-running-job", rule)
    fits: list[tuple[GpuLoad, int]] = []
    avoided = full = too_big = 0
    for g in busy:
        if len(g.jobs) >= max_jobs_per_gpu:
            full += 1
            continue
        if any(_avoided(avoid, newcomer.workload, j.workload) for j in g.jobs):
            avoided += 1
            continue
        used = g.used_bytes
        if used + newcomer.mem_bytes > max_fraction * g.capacity_bytes:
            too_big += 1
            continue
        fits.append((g, used))
    if not fits:
        if avoided and not too_big and not full:
            reason = "avoided-pair"
        elif full and not too_big and not avoided:
            reason = "gpus-full"
        else:
            reason = f"no-fit-under-{max_fraction:.0%}-cap"
        return CorunnerChoice(None, (), reason, rule)
    if rule == "lowest-util":
        g, used = min(fits, key=lambda f: (f[1], f[0].util_pct, f[0].gpu_id))
    else:
        g, used = min(fits, key=lambda f: (-f[1], f[0].util_pct, f[0].gpu_id))
    after = (used + newcomer.mem_bytes) / g.capacity_bytes
    reason = (f"{rule}: {g.gpu_id} at {used / g.capacity_bytes:.0%} memory, "
              f"{after:.0%} with the newcomer (cap {max_fraction:.0%})")
    return CorunnerChoice(g.gpu_id, tuple(j.job_id for j in g.jobs), reason, rule)
