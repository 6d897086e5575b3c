"""Plans that re-lay MIG slices so the head job's instance fits.

Design note: on a partitioned GPU a head job's profile may not fit although enough memory
slices are free, because busy instances sit where its placements would go (MIG placements
are fixed starts). The node agent's layout step (`mig.node_layout`) already destroys and
re-creates *idle* instances (`mig.planner.plan_merge_split`); what it cannot do is move a
*busy* one. A plan here moves the jobs of one or a few busy instances of GPU A (movable
ones only) to the same profile on other GPUs, where an idle instance of that profile waits,
or the future-reachability state machine places one (`mig.policies.choose`), or idle
instances there can be merged/split for it (`plan_merge_split`, busy ones untouched); then
A's layout is re-made by `plan_merge_split` with those instances idle. The same profile
means the same compute, so a moved job runs as fast as before; its cost is its checkpoint
wait, lost work and restart. Every state is checked by `mig.fsm`, so a plan never asks for
a layout the GPU cannot take.
"""
from __future__ import annotations

from itertools import combinations

from mig.fsm import PartitionState, Placement
from mig.planner import plan_merge_split
from mig.policies import choose
from packer.regroup_model import Cluster, GpuKey, HeadJob, Holding, RunningJob
from packer.regroup_plan import Move, RegroupPlan, RegroupSettings, build_plan, make_move
from packer.regroup_score import gpus_used, head_start


def busy_instances(cluster: Cluster, key: GpuKey) -> dict[Placement, RunningJob]:
    out: dict[Placement, RunningJob] = {}
    for j in cluster.jobs:
        for h in j.holdings:
            if h.gpu == key and h.placement is not None:
                out[h.placement] = j
    return out


def _host(state: PartitionState, busy: set[Placement], profile: str
          ) -> tuple[PartitionState, set[Placement], Placement] | None:
    """Make room for one more busy instance of `profile`: an idle one, a new one, or a
    merge/split of idle ones. Returns the new state, busy set and the instance."""
    idle = next((p for p in state.placements if p.profile == profile and p not in busy), None)
    if idle is not None:
        return state, busy | {idle}, idle
    start = choose(state, profile, "fsm").start
    if start is None:
        plan = plan_merge_split(state, profile, busy=list(busy))
        if not plan.feasible:
            return None
        for p in plan.destroy:
            state = state.free(p.profile, p.start)
        for p in plan.recreate:
            state = state.alloc(p.profile, p.start)
        start = plan.start
    state = state.alloc(profile, start)
    placed = Placement(profile, start)
    return state, busy | {placed}, placed


def mig_plans(cluster: Cluster, head: HeadJob, now: float, settings: RegroupSettings, max_moves: int
              ) -> tuple[list[RegroupPlan], list[str]]:
    """Candidate re-layouts for a head job that wants a MIG instance of `head.mig_profile`."""
    profile = head.mig_profile
    notes: list[str] = []
    migs = [g for g in cluster.gpus if g.mig is not None and profile in g.mig.space.profile_pos]
    if not migs:
        return [], [f"no MIG GPU offers {profile}"]
    busy_of = {g.key: busy_instances(cluster, g.key) for g in migs}
    for g in migs:
        if plan_merge_split(g.mig, profile, busy=list(busy_of[g.key])).feasible:
            return [], [f"head job {head.job_id} fits now on {g.node}:{g.index} (idle slices)"]
    without = head_start(cluster, head, now)
    jobs = {j.job_id: j for j in cluster.jobs}
    plans: list[RegroupPlan] = []
    for a in migs:
        busy = busy_of[a.key]
        movable = [p for p, j in busy.items() if j.move.movable and len(j.holdings) == 1]
        for k in range(1, min(max_moves, len(movable)) + 1):
            for combo in combinations(movable, k):
                staying = [p for p in busy if p not in combo]
                local = plan_merge_split(a.mig, profile, busy=staying)
                if not local.feasible:
                    continue
                plan = _relocate(cluster, head, a.key, local.start, combo, busy_of, migs, now, settings, without,
                                 jobs)
                if plan is None:
                    notes.append(f"{a.node}:{a.index}: no other GPU can take {[str(p) for p in combo]}")
                else:
                    plans.append(plan)
    if not plans:
        notes.append(f"no movable busy instances whose move lets {profile} fit")
    return plans, notes


def _relocate(cluster: Cluster, head: HeadJob, src: GpuKey, start: int, combo: tuple[Placement, ...],
              busy_of: dict[GpuKey, dict[Placement, RunningJob]], migs, now: float, settings: RegroupSettings,
              without: float, jobs: dict[int, RunningJob]) -> RegroupPlan | None:
    states = {g.key: g.mig for g in migs if g.key != src}
    busy = {k: set(busy_of[k]) for k in states}
    moves: list[Move] = []
    for p in sorted(combo, key=lambda p: -cluster.gpu(src).mig.space.catalog.profile(p.profile).memory_slices):
        job = busy_of[src][p]
        best = None
        for key in sorted(states):
            hosted = _host(states[key], busy[key], p.profile)
            if hosted is None:
                continue
            state, now_busy, placed = hosted
            rank = (-state.reachable_full_configs, key)  # keep the target GPU's future open
            if best is None or rank < best[0]:
                best = (rank, key, state, now_busy, placed)
        if best is None:
            return None
        _, key, state, now_busy, placed = best
        states[key], busy[key] = state, now_busy
        why = f"job {job.job_id} moves from {src[0]}:{src[1]} {p} to {key[0]}:{key[1]} {placed}"
        moves.append(make_move(job, (Holding(key[0], key[1], placement=placed),), now, settings, job.speed, 0.0,
                               gpus_used(job, cluster), why))
    g = cluster.gpu(src)
    target = f"{g.node}:{g.index} mig:{head.mig_profile}@{start}"
    cat = g.mig.space.catalog
    frac = cat.profile(head.mig_profile).memory_slices / cat.memory_slices
    reason = (f"moving {len(moves)} busy instance(s) off {g.node}:{g.index} lets {head.mig_profile} "
              f"be laid out at slice {start} for job {head.job_id}")
    return build_plan("mig-relayout", head.job_id, target, (src,), moves, jobs, without, frac, now, settings, reason)
