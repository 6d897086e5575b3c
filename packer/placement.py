"""Where a pending packed job must not go: pure rules the monitor applies as `ExcNodeList`.

Slurm chooses the GPU inside a node itself, so the finest steering it offers the helper is
the node: a pending packed job is kept off every node where a job it must not share a GPU
with is running (pair avoidance: a pair that hurt is never packed again), or where Slurm 22.05 has
already put a whole-GPU job and shards on the same GPU (`quirk_nodes`).

A pending packed job is also kept off a node where the co-runner rule (what the
simulator's colocate packs by) finds no GPU for it and the pair knowledge predicts a job
there would lose more than the contention watch tolerates (`slow_nodes`).

The user's own `--exclude` is never dropped: what the helper adds is tracked separately
and `merge_exclusions` lays it over the user's list.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from packer.corunner import GpuLoad, Newcomer, PairSpeed, Ranked, predicted_speeds


@dataclass(frozen=True)
class Running:
    """A running job as placement sees it."""

    job_id: int
    fingerprint: str | None
    nodes: tuple[str, ...]
    packed: bool  # holds shards (shares a GPU) rather than whole GPUs


def avoid_nodes(
    fingerprint: str | None,
    running: Iterable[Running],
    must_avoid: Callable[[str, str], bool],
) -> frozenset[str]:
    """Nodes running a job whose fingerprint must not share a GPU with `fingerprint`."""
    if not fingerprint:
        return frozenset()
    out: set[str] = set()
    for job in running:
        if job.fingerprint and job.packed and must_avoid(fingerprint, job.fingerprint):
            out.update(job.nodes)
    return frozenset(out)


@dataclass(frozen=True)
class NodeGpus:
    """The GPUs of one node a packed job could land on (those not held whole); a GPU with
    no job is free."""

    node: str
    gpus: tuple[GpuLoad, ...]


def slow_nodes(
    newcomer: Newcomer,
    nodes: Iterable[NodeGpus],
    rank: Callable[[Newcomer, Sequence[GpuLoad]], list[Ranked]],
    pair_speed: PairSpeed,
    min_speed: float,
    limits: tuple[int, float] | None = None,
) -> dict[str, str]:
    """Nodes to keep `newcomer` off, each with why: every GPU it could land on is busy with
    packed jobs, none qualifies for it (`rank`: the co-runner rule with the pair prediction
    and the memory cap), and on at least one a job there is predicted to keep under
    `min_speed` of its speed. With `limits` (jobs per GPU, cap on the GPU's total memory:
    the replay's limits, which Slurm's shard count does not hold), a GPU at the jobs-per-GPU
    limit or that the newcomer would take past the cap is a reason too; without, a node full
    by memory or jobs per GPU alone is left to Slurm's own shard count. A node with a free
    GPU or a qualifying one stays allowed."""
    out: dict[str, str] = {}
    for n in nodes:
        if not n.gpus or any(not g.jobs for g in n.gpus) or rank(newcomer, n.gpus):
            continue
        slow = [why for g in n.gpus if (why := _over_limit(newcomer, g, limits))]
        for g in n.gpus:
            pred = predicted_speeds(newcomer, g, pair_speed)
            if pred is None:
                continue
            theirs = pred[1]
            worst = min(range(len(theirs)), key=theirs.__getitem__)
            if theirs[worst] < min_speed:
                j = g.jobs[worst]
                slow.append(f"GPU {g.gpu_id}: predicted slowdown with job {j.job_id} ({j.workload}): "
                            f"{theirs[worst]:.2f}")
        if slow:
            out[n.node] = "; ".join(slow)
    return out


def _over_limit(newcomer: Newcomer, gpu: GpuLoad, limits: tuple[int, float] | None) -> str:
    """Why ``newcomer`` may not join ``gpu`` by the limits (jobs per GPU, cap), or ""."""
    if limits is None:
        return ""
    max_jobs, cap = limits
    if len(gpu.jobs) >= max_jobs:
        return f"GPU {gpu.gpu_id}: {len(gpu.jobs)} jobs (limit {max_jobs} a GPU)"
    total = (gpu.used_bytes + newcomer.mem_bytes) / gpu.capacity_bytes
    if total > cap:
        return f"GPU {gpu.gpu_id}: {total:.0%} of its memory with it (cap {cap:.0%} of the GPU's total)"
    return ""


def submit_exclusion(
    fingerprint: str | None,
    running: Iterable[Running],
    must_avoid: Callable[[str, str], bool],
    gpu_nodes: Iterable[str],
) -> frozenset[str] | None:
    """Nodes a job about to be packed must be kept off, decided at submit time.

    None when avoiding them would leave the job no GPU node at all: it is then better kept
    whole (a whole GPU is never shared) than excluded everywhere, which Slurm would refuse."""
    avoid = avoid_nodes(fingerprint, running, must_avoid)
    nodes = set(gpu_nodes)
    if avoid and nodes and not (nodes - avoid):
        return None
    return avoid


def merge_exclusions(current: Iterable[str], ours_before: Iterable[str], ours_now: Iterable[str]) -> tuple[str, ...]:
    """The job's new exclusion list: the user's part of `current` plus what we add now.

    The user's part is `current` minus what we added before (a node the user excluded
    and we also excluded stays excluded, since it cannot be told apart: safe side)."""
    current_set, before, now = set(current), set(ours_before), set(ours_now)
    user = current_set - before
    return tuple(sorted(user | now))


@dataclass(frozen=True)
class GpuHolders:
    """Who holds one GPU of one node: whole-GPU jobs and shard jobs, with start times."""

    node: str
    index: int
    whole: tuple[tuple[int, float], ...]  # (job_id, started_at)
    shards: tuple[tuple[int, float], ...]


def gpu_holders(allocations: Iterable[tuple[int, float, str, str, tuple[int, ...]]]) -> list[GpuHolders]:
    """Group (job_id, started_at, node, kind 'gpu'|'shard', indexes) by (node, GPU index)."""
    table: dict[tuple[str, int], dict[str, list[tuple[int, float]]]] = {}
    for job_id, started_at, node, kind, indexes in allocations:
        if kind not in ("gpu", "shard"):
            continue
        for index in indexes:
            slot = table.setdefault((node, index), {"gpu": [], "shard": []})
            if (job_id, started_at) not in slot[kind]:
                slot[kind].append((job_id, started_at))
    return [
        GpuHolders(node, index, tuple(sorted(v["gpu"], key=lambda t: t[1])), tuple(sorted(v["shard"], key=lambda t: t[1])))
        for (node, index), v in sorted(table.items())
    ]


@dataclass(frozen=True)
class QuirkCollision:
    """A GPU held whole by one job and in shares by another (Slurm 22.05 before 23.11.5)."""

    node: str
    index: int
    requeue: int  # the job that arrived last: it is requeued
    keep: tuple[int, ...]  # the jobs that were there first

    @property
    def reason(self) -> str:
        return (
            f"GPU {self.index} of {self.node} was given whole and as shards at once (Slurm 22.05 bug, "
            f"fixed in 23.11.5); job {self.requeue} came last and is requeued, jobs {list(self.keep)} keep it"
        )


def quirk_collisions(holders: Iterable[GpuHolders]) -> list[QuirkCollision]:
    """GPUs with both a whole-GPU job and shard jobs; the newest arrival loses.

    When the whole-GPU job came first, every shard job is requeued (newest first, one per
    round); when shard jobs came first, the whole-GPU job is requeued."""
    out: list[QuirkCollision] = []
    for h in holders:
        if not h.whole or not h.shards:
            continue
        everyone = sorted([*h.whole, *h.shards], key=lambda t: (t[1], t[0]))
        newest = everyone[-1][0]
        out.append(QuirkCollision(h.node, h.index, newest, tuple(j for j, _ in everyone[:-1])))
    return out


def pending_exclusions(
    pending: Mapping[int, str | None],
    running: Iterable[Running],
    must_avoid: Callable[[str, str], bool],
) -> dict[int, frozenset[str]]:
    """For each pending packed job (id -> fingerprint): the nodes it must avoid now."""
    running = list(running)
    return {job_id: avoid_nodes(fp, running, must_avoid) for job_id, fp in pending.items()}
