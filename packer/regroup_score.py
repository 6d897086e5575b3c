"""The efficiency metric of running jobs and the head job's start without regrouping.

Design note: US 10,884,795 (claim 1) computes for every running job an efficiency
metric from the number of accelerators it uses, how they are spread over hosts and its
remaining time, and sorts the jobs by it into a prioritised list (smallest first); plans
take the jobs at the end that matters. Here, for one job:

- `gpus_used`: whole GPUs held, a packed job's shares as a fraction of its GPU, a MIG
  instance's memory slices as a fraction of the GPU's;
- `locality`: the fewest nodes its GPUs could sit on over the nodes they span (1 when
  compact, 1/2 for a 4-GPU job split 2+2 over two 8-GPU nodes);
- `speed`: its predicted speed relative to alone where it is (the pair speed of a packed
  job, from `packer.corunner.predicted_speeds`; 1 alone);
- `efficiency = speed × locality` (useful work per GPU held, 0..1), and
  `waste_gpu_s = (1 − efficiency) × gpus_used × remaining_s`: the GPU-seconds its present
  placement will waste before it ends.

`prioritised` sorts least efficient first, then most waste: the jobs whose move costs the
cluster least and recovers most. The remaining time cuts both ways and is kept apart: a
job about to end is better waited for than moved, which the plans' costing sees (the head's
gain shrinks when the GPU frees itself soon).
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations

from mig.fsm import Placement
from mig.planner import plan_merge_split
from packer.regroup_model import Cluster, GpuKey, HeadJob, RunningJob

MAX_NODE_COMBOS = 8  # nodes considered when a multi-node head's start is estimated


@dataclass(frozen=True)
class JobScore:
    job_id: int
    gpus_used: float
    nodes_spanned: int
    min_nodes: int
    remaining_s: float
    speed: float
    efficiency: float
    waste_gpu_s: float
    movable: bool

    @property
    def locality(self) -> float:
        return self.min_nodes / self.nodes_spanned if self.nodes_spanned else 1.0


def gpus_used(job: RunningJob, cluster: Cluster) -> float:
    total = 0.0
    for h in job.holdings:
        if h.placement is not None:
            g = cluster.gpu(h.gpu)
            slices = g.mig.space.catalog.memory_slices if g.mig is not None else 8
            prof = g.mig.space.catalog.profile(h.placement.profile) if g.mig is not None else None
            total += (prof.memory_slices if prof else 1) / slices
        elif h.shares is not None:
            total += h.shares / cluster.gpu(h.gpu).shares
        else:
            total += 1.0
    return total


def min_nodes(n_gpus: int, cluster: Cluster) -> int:
    """The fewest nodes `n_gpus` whole GPUs fit on (by the largest nodes)."""
    sizes = sorted((len(v) for v in cluster.gpus_per_node().values()), reverse=True)
    left, used = n_gpus, 0
    for s in sizes:
        if left <= 0:
            break
        left -= s
        used += 1
    return max(1, used)


def score_job(job: RunningJob, cluster: Cluster) -> JobScore:
    whole = sum(1 for h in job.holdings if h.whole)
    spanned = len(job.nodes)
    least = min_nodes(whole, cluster) if whole > 1 else 1
    locality = least / spanned if spanned else 1.0
    eff = max(0.0, min(1.0, job.speed)) * locality
    used = gpus_used(job, cluster)
    waste = (1.0 - eff) * used * max(0.0, job.remaining_s)
    return JobScore(job.job_id, used, spanned, least, job.remaining_s, job.speed, eff, waste, job.move.movable)


def prioritised(cluster: Cluster) -> list[JobScore]:
    """Every running job's score, least efficient first, then the most waste."""
    return sorted((score_job(j, cluster) for j in cluster.jobs),
                  key=lambda s: (s.efficiency, -s.waste_gpu_s, s.job_id))


def release_times(cluster: Cluster, now: float) -> dict[GpuKey, float]:
    """When each GPU is expected to be free of every job on it (now when idle)."""
    out = {g.key: now for g in cluster.gpus}
    for j in cluster.jobs:
        for key in j.gpus:
            out[key] = max(out.get(key, now), now + max(0.0, j.remaining_s))
    return out


def whole_gpus_start(cluster: Cluster, n: int, max_nodes: int | None, now: float,
                     releases: dict[GpuKey, float] | None = None,
                     exclude: Iterable[GpuKey] = ()) -> float:
    """The earliest time `n` whole GPUs on at most `max_nodes` nodes are free (inf: never)."""
    rel = releases if releases is not None else release_times(cluster, now)
    skip = set(exclude)
    per_node: dict[str, list[float]] = {}
    for g in cluster.gpus:
        if g.mig is not None or g.key in skip:
            continue
        per_node.setdefault(g.node, []).append(rel[g.key])
    for v in per_node.values():
        v.sort()
    span = max_nodes if max_nodes is not None else min_nodes(n, cluster)
    if span >= len(per_node):
        allv = sorted(t for v in per_node.values() for t in v)
        return allv[n - 1] if len(allv) >= n else math.inf
    if span == 1:
        return min((v[n - 1] for v in per_node.values() if len(v) >= n), default=math.inf)
    per = max(1, math.ceil(n / span))
    ranked = sorted(per_node, key=lambda k: (per_node[k][min(per, len(per_node[k])) - 1], k))[:MAX_NODE_COMBOS]
    best = math.inf
    for combo in combinations(ranked, span):
        allv = sorted(t for k in combo for t in per_node[k])
        if len(allv) >= n:
            best = min(best, allv[n - 1])
    return best


def mig_start(cluster: Cluster, profile: str, now: float) -> float:
    """The earliest time an instance of `profile` can be made on some MIG GPU, from the
    busy instances' ends (idle instances may be destroyed: `mig.planner.plan_merge_split`)."""
    best = math.inf
    for g in cluster.gpus:
        if g.mig is None or profile not in g.mig.space.profile_pos:
            continue
        busy: list[tuple[float, Placement]] = []
        for j in cluster.jobs:
            for h in j.holdings:
                if h.gpu == g.key and h.placement is not None:
                    busy.append((now + max(0.0, j.remaining_s), h.placement))
        busy.sort(key=lambda b: (b[0], b[1].start))
        times = [now] + [t for t, _ in busy]
        for t in times:
            still = [p for end, p in busy if end > t]
            if plan_merge_split(g.mig, profile, busy=still).feasible:
                best = min(best, t)
                break
    return best


def head_start(cluster: Cluster, head: HeadJob, now: float) -> float:
    """When the head starts without regrouping: its `expected_start`, else the estimate."""
    if head.expected_start is not None:
        return head.expected_start
    if head.mig_profile is not None:
        return mig_start(cluster, head.mig_profile, now)
    return whole_gpus_start(cluster, head.gpus, head.max_nodes, now)
