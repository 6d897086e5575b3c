"""Plans that free whole GPUs (or whole nodes) for a head job that wants whole GPUs.

Design note: the head wants `gpus` whole GPUs on at most `max_nodes` nodes (default: the
fewest that hold them). The room often exists in pieces: GPUs held by a packed job or two
that would fit beside other packed jobs, or a multi-GPU job spread over more nodes than it
needs. For each small set of nodes (the most promising `MAX_NODE_COMBOS`, by GPUs that are
idle or could be cleared), GPUs are cleared greedily by the cost per GPU freed (a
multi-GPU job's move frees all its GPUs at once), ties to the least efficient jobs first
(`packer.regroup_score.prioritised`, the seed's prioritised list). Every job to move must
be movable and must land outside the head's GPUs:

- a packed job on free shares of a GPU with packed jobs (best predicted pair speed, then
  best fit), or on an idle GPU elsewhere (when `allow_idle_targets`; this frees nodes);
- a whole-GPU or multi-GPU job on idle GPUs of as few nodes as possible, never on more
  nodes than now (so a spread job is compacted: fewer nodes, faster by `spread_penalty`).

A plan with more moves than the budget allows is not proposed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

from packer.regroup_model import Cluster, GpuKey, HeadJob, Holding, RunningJob
from packer.regroup_plan import Move, PairSpeed, RegroupPlan, RegroupSettings, build_plan, make_move, \
    packed_speeds, spread_speed
from packer.regroup_score import gpus_used, head_start, min_nodes, prioritised

MAX_NODE_COMBOS = 8


@dataclass
class _Room:
    """Mutable occupancy while moves are laid out (one plan's scratch state)."""

    cluster: Cluster
    forbidden: set[GpuKey]
    jobs_on: dict[GpuKey, list[RunningJob]] = field(default_factory=dict)
    used_shares: dict[GpuKey, int] = field(default_factory=dict)
    whole: set[GpuKey] = field(default_factory=set)

    @classmethod
    def of(cls, cluster: Cluster, leaving: set[int], forbidden: set[GpuKey]) -> "_Room":
        room = cls(cluster, forbidden)
        for g in cluster.gpus:
            room.jobs_on[g.key] = []
            room.used_shares[g.key] = 0
        for j in cluster.jobs:
            if j.job_id in leaving:
                continue
            for h in j.holdings:
                room.jobs_on.setdefault(h.gpu, []).append(j)
                if h.whole or h.placement is not None:
                    room.whole.add(h.gpu)
                else:
                    room.used_shares[h.gpu] = room.used_shares.get(h.gpu, 0) + (h.shares or 0)
        return room

    def idle(self, key: GpuKey) -> bool:
        return key not in self.forbidden and not self.jobs_on.get(key) and self.cluster.gpu(key).mig is None

    def idle_by_node(self) -> dict[str, list[GpuKey]]:
        out: dict[str, list[GpuKey]] = {}
        for g in self.cluster.gpus:
            if self.idle(g.key):
                out.setdefault(g.node, []).append(g.key)
        return out


def _place_whole(job: RunningJob, room: _Room) -> tuple[Holding, ...] | None:
    """Idle GPUs for a whole-GPU job on as few nodes as possible (never more than now)."""
    k = sum(1 for h in job.holdings if h.whole)
    by_node = room.idle_by_node()
    one = sorted((n for n, v in by_node.items() if len(v) >= k), key=lambda n: (len(by_node[n]), n))
    if one:
        picked = by_node[one[0]][:k]
    else:
        picked = []
        for n in sorted(by_node, key=lambda n: (-len(by_node[n]), n)):
            picked += by_node[n][:k - len(picked)]
            if len(picked) >= k:
                break
        if len(picked) < k or len({n for n, _ in picked}) > len(job.nodes):
            return None
    for key in picked:
        room.jobs_on[key].append(job)
        room.whole.add(key)
    return tuple(Holding(n, i) for n, i in picked)


def _place_packed(job: RunningJob, room: _Room, settings: RegroupSettings, pair_speed: PairSpeed | None
                  ) -> tuple[Holding, float, list[RunningJob], list[float]] | None:
    """(where, its new speed, residents there, their new speeds) for a packed job."""
    shares = sum(h.shares or 0 for h in job.holdings)
    best = None
    for g in room.cluster.gpus:
        key = g.key
        if key in room.forbidden or key in room.whole or g.mig is not None or key in job.gpus:
            continue
        residents = list(room.jobs_on.get(key, []))
        if not residents and not settings.allow_idle_targets:
            continue
        if len(residents) >= room.cluster.max_jobs_per_gpu:
            continue
        if g.shares - room.used_shares[key] < shares:
            continue
        mine, theirs = packed_speeds(job, residents, pair_speed)
        delta = job.remaining_s * (job.speed / max(1e-6, mine) - 1.0) + sum(
            r.remaining_s * (r.speed / max(1e-6, s) - 1.0) for r, s in zip(residents, theirs))
        # packed neighbours first (an idle GPU is a whole GPU spent), cheapest, best fit
        rank = (not residents, round(delta, 3), g.shares - room.used_shares[key] - shares, key)
        if best is None or rank < best[0]:
            best = (rank, key, mine, residents, theirs)
    if best is None:
        return None
    _, key, mine, residents, theirs = best
    room.jobs_on[key].append(job)
    room.used_shares[key] += shares
    return Holding(key[0], key[1], shares=shares), mine, list(residents), theirs


def _clear_cost(job: RunningJob, now: float, settings: RegroupSettings) -> float:
    wait, lost = job.move.timing(now, job.started_at)
    return lost + job.restart_s + settings.requeue_s + 0.01 * wait


def whole_gpu_plans(cluster: Cluster, head: HeadJob, now: float, settings: RegroupSettings, max_moves: int,
                    pair_speed: PairSpeed | None = None) -> tuple[list[RegroupPlan], list[str]]:
    """Candidate plans for a whole-GPU head, and notes on what was ruled out."""
    notes: list[str] = []
    per_node = cluster.gpus_per_node()
    span = head.max_nodes or min_nodes(head.gpus, cluster)
    jobs_on = {g.key: cluster.jobs_on(g.key) for g in cluster.gpus}
    usable = {g.key for g in cluster.gpus if g.mig is None}
    free = {k for k in usable if not jobs_on[k]}
    order = {s.job_id: i for i, s in enumerate(prioritised(cluster))}

    def clearable(key: GpuKey) -> bool:
        return key in usable and all(j.move.movable and not j.on_mig for j in jobs_on[key])

    nodes = sorted(per_node, key=lambda n: (-sum(1 for g in per_node[n] if g.key in free or clearable(g.key)),
                                            -sum(1 for g in per_node[n] if g.key in free), n))
    idle_counts = sorted(((sum(1 for g in per_node[n] if g.key in free), n) for n in per_node), reverse=True)
    if sum(k for k, _ in idle_counts[:span]) >= head.gpus:
        where = ",".join(sorted(n for _, n in idle_counts[:span]))
        notes.append(f"head job {head.job_id} fits now on idle GPUs of {where}")
        return [], notes
    without = head_start(cluster, head, now)
    plans: list[RegroupPlan] = []
    seen: set[frozenset[int]] = set()
    for n_nodes in range(1, span + 1):
        for combo in combinations(nodes[:MAX_NODE_COMBOS], n_nodes):
            pool = [g.key for n in combo for g in per_node[n] if g.key in free or clearable(g.key)]
            if len(pool) < head.gpus:
                continue
            chosen = [k for k in pool if k in free]
            moved: dict[int, RunningJob] = {}
            while len(chosen) < head.gpus:
                best = None
                for k in pool:
                    if k in chosen:
                        continue
                    new = {j.job_id: j for j in jobs_on[k] if j.job_id not in moved}
                    after = {**moved, **new}
                    freed = [p for p in pool if p not in chosen and all(j.job_id in after for j in jobs_on[p])]
                    cost = sum(_clear_cost(j, now, settings) for j in new.values())
                    rank = (cost / len(freed), min((order[i] for i in new), default=0), k)
                    if best is None or rank < best[0]:
                        best = (rank, new, freed)
                _, new, freed = best
                moved.update(new)
                chosen += freed
            if len(moved) > max_moves:
                notes.append(f"{','.join(combo)}: {len(moved)} moves needed, {max_moves} allowed")
                continue
            key = frozenset(moved)
            if key in seen or not moved:
                continue
            seen.add(key)
            head_gpus = sorted(chosen, key=lambda k: (k not in free, k))[:head.gpus]
            plan = _lay_out(cluster, head, head_gpus, moved, now, settings, pair_speed, without)
            if plan is None:
                notes.append(f"{','.join(combo)}: no room elsewhere for jobs {sorted(moved)}")
            else:
                plans.append(plan)
    return plans, notes


def _lay_out(cluster: Cluster, head: HeadJob, head_gpus: list[GpuKey], moved: dict[int, RunningJob], now: float,
             settings: RegroupSettings, pair_speed: PairSpeed | None, without: float) -> RegroupPlan | None:
    room = _Room.of(cluster, set(moved), set(head_gpus))
    moves: list[Move] = []
    compacted = False
    by_size = sorted(moved.values(), key=lambda j: (j.packed, -len(j.holdings), j.job_id))
    for j in by_size:
        used = gpus_used(j, cluster)
        if j.packed:
            placed = _place_packed(j, room, settings, pair_speed)
            if placed is None:
                return None
            where, mine, residents, theirs = placed
            side = sum(r.remaining_s * (r.speed / max(1e-6, s) - 1.0) for r, s in zip(residents, theirs))
            why = (f"packed job {j.job_id} moves to {where.node}:{where.index}"
                   + (f" beside jobs {[r.job_id for r in residents]}" if residents else " (idle GPU)")
                   + f" to free {j.gpus[0][0]}:{j.gpus[0][1]} for job {head.job_id}")
            moves.append(make_move(j, (where,), now, settings, mine, max(0.0, side), used, why))
        else:
            to = _place_whole(j, room)
            if to is None:
                return None
            least = min_nodes(len(to), cluster)
            n_new = len({h.node for h in to})
            old_speed = j.speed * spread_speed(len(j.nodes), least, settings.spread_penalty)
            new_speed = j.speed * spread_speed(n_new, least, settings.spread_penalty)
            compacted |= n_new < len(j.nodes)
            why = (f"job {j.job_id} ({len(to)} GPU{'s' if len(to) > 1 else ''}) moves from "
                   f"{len(j.nodes)} node(s) to {n_new} ({','.join(sorted({h.node for h in to}))}) "
                   f"to free GPUs for job {head.job_id}")
            moves.append(make_move(j, to, now, settings, new_speed, 0.0, used, why, old_speed=old_speed))
    kind = ("compact-multi-gpu" if compacted else
            "consolidate-packed" if all(j.packed for j in moved.values()) else "free-gpus")
    target = ",".join(f"{n}:{i}" for n, i in head_gpus)
    nodes = sorted({n for n, _ in head_gpus})
    reason = (f"{len(moves)} move(s) free {len(head_gpus)} whole GPU(s) on {','.join(nodes)} "
              f"for job {head.job_id}")
    return build_plan(kind, head.job_id, target, tuple(head_gpus), moves, {j.job_id: j for j in cluster.jobs},
                      without, float(head.gpus), now, settings, reason)
