"""Grow by preemption: a packed job that must grow evicts younger neighbours.

A running packed job must grow when its memory forecast warns (the memory watch would
restart it on a larger share, through the queue) or when its remembered size is larger
than its share. It is a *running preemptor*: `packer.grow.plan_growth` (`ctx.rules.grow`, the
decision the simulator uses too) says which younger packed jobs on the same GPU to requeue, youngest
first and no more than needed, never an older job or a whole-GPU job. When enforced:

1. each victim is requeued at the head of the queue (`grow-evict`) and left held, its
   pair not recorded (growth, not contention);
2. the grower is requeued with its larger share, its other nodes excluded (pinned to its
   node) and made the next to start (`grow-restart`), so it restarts at once on its GPU;
3. once the grower runs again (or `grow_hold_victims_s` passed), each victim is released
   at the head of the queue (`grow-release`, `watches/grow_release.py`).

While the grower waits in the queue it is a *queued preemptor*: a job that started on its
GPU after it was requeued (overtook it) and keeps it from its minimum is evicted the same
way, under the queued thresholds. When the decision does not act (`grow-skip`, once per
run and reason) or needs no eviction (the room is free), the memory watch, which runs
after this one, restarts the job through the queue as before. The action kind `grow-preempt` is off | shadow | enforce; in shadow
the same decision is an event and an action-ledger row and nothing changes.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from packer import comment as comment_mod
from packer.decision import max_shards
from packer.request import gres_text
from packer.grow import EVICT_KIND, RESTART_KIND, SKIP_KIND, GpuShares, GrowDecision, Preemptor, Tenant, \
    grow_request
from slurm_plugin.helper.watches.memory import capacity_of, track_forecast
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.tracks import ACTIVE, Track, job_gpu_type, job_shards, wants_whole_gpu
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)

GIB = 1024**3
KIND = "grow-preempt"


@dataclass(frozen=True)
class QueuedGrower:
    """A grower requeued to restart bigger on `node`'s GPU `gpu`, waiting in the queue."""

    node: str
    gpu: int
    since: float  # when it was requeued
    min_shares: int
    max_shares: int


def gpu_label(node: str, gpu: int) -> str:
    return f"{node}:{gpu}"


class GrowWatch:
    name = "grow"

    def __init__(self) -> None:
        self._wanting: dict[tuple[int, float], float] = {}  # (job, run start) -> first wanted more
        self._said: set[tuple[int, float, str]] = set()  # skip reasons already logged
        self._decided: set[tuple[int, float]] = set()  # runs already decided (one action per run)
        self.queued: dict[int, QueuedGrower] = {}

    def job_maps(self) -> list:
        """What it remembers per job (`round.KeepsJobs`)."""
        return [self._wanting, self._said, self._decided, self.queued]

    def round(self, ctx: RoundContext) -> None:
        mode = ctx.actions.mode_of(KIND)
        if mode.mode == "off":
            return
        preemptors = self._running_preemptors(ctx) + self._queued_preemptors(ctx)
        if not preemptors:
            return
        total = ctx.config.shares_per_gpu
        gpus = [self._gpu(ctx, label, total) for label in sorted({p.gpu for p in preemptors})]
        for d in ctx.rules.grow(gpus, preemptors, ctx.now):
            p = next(p for p in preemptors if p.job_id == d.preemptor)
            if not d.acted:
                if p.running:
                    self._skip(ctx, p, d)
                continue
            if not d.evictions:
                continue  # room is free: a running grower is the memory watch's plain restart
            self._apply(ctx, p, d, mode)

    # ------------------------------------------------------------------ who must grow
    def _running_preemptors(self, ctx: RoundContext) -> list[Preemptor]:
        out = []
        for t in list(ctx.tracks.values()):
            job = ctx.jobs.get(t.job_id)
            if (job is None or job.state != "RUNNING" or not t.shards or not t.samples or t.job_id in ctx.acted
                    or (t.job_id, t.started_at) in self._decided):
                continue
            p = self._must_grow(ctx, t, job)
            if p is not None:
                out.append(p)
        return out

    def _must_grow(self, ctx: RoundContext, t: Track, job: Job) -> Preemptor | None:
        """A preemptor for `t` when its forecast warns or its remembered size is larger."""
        share = ctx.config.share_bytes
        capacity = capacity_of(t, share, ctx.gpu_model)
        if not capacity:
            return None
        forecast = self._forecast(ctx, t, job, capacity)
        remembered = ctx.actions.store.remembered_size(t.fingerprint) if t.fingerprint else None
        if forecast is not None and forecast.warn:
            need, upper = forecast.predicted_peak_bytes, forecast.upper_bytes
            why = (f"memory forecast {forecast.predicted_peak_bytes / GIB:.1f}GiB (upper "
                   f"{forecast.upper_bytes / GIB:.1f}GiB) outgrows its {capacity / GIB:.1f}GiB share")
        elif remembered and remembered > t.shards:
            need, upper = remembered * share * 0.999, None
            why = f"its remembered size {remembered} shares is above its share of {t.shards}"
        else:
            return None
        key = (t.job_id, t.started_at)
        since = self._wanting.setdefault(key, ctx.now)
        cap = max_shards(ctx.config)
        request = grow_request(t.shards, need, share, cap, upper_bytes=upper, remembered_shares=remembered,
                               rungs=ctx.config.rungs)
        if request is None:
            self._say(ctx, t.job_id, t.started_at, f"needs more than a packed job may hold ({cap} shares): "
                      f"a whole GPU, through the queue ({why})")
            return None
        return Preemptor(t.job_id, gpu_label(t.node, t.gpu_index), True, request[0], request[1], since=t.started_at,
                         waiting_since=since, held_shares=t.shards, why=why)

    def _forecast(self, ctx: RoundContext, t: Track, job: Job, capacity: float):
        """The run's forecast, shared with the memory watch (which runs after this one)."""
        return track_forecast(ctx, t, job, capacity)

    def _queued_preemptors(self, ctx: RoundContext) -> list[Preemptor]:
        out = []
        for job_id, q in list(self.queued.items()):
            job = ctx.jobs.get(job_id)
            if job is None or job.state != "PENDING" or job_id in ctx.acted:
                if job is None or job.state != "PENDING":
                    self.queued.pop(job_id, None)
                continue
            out.append(Preemptor(job_id, gpu_label(q.node, q.gpu), False, q.min_shares, q.max_shares,
                                 since=q.since, waiting_since=q.since,
                                 why="requeued to restart bigger on this GPU, overtaken by newer jobs"))
        return out

    # ------------------------------------------------------------------ the GPU as it is
    def _gpu(self, ctx: RoundContext, label: str, total: int) -> GpuShares:
        node, _, index = label.rpartition(":")
        tenants = []
        for job in ctx.jobs.values():
            if job.state not in ACTIVE or job.job_id in ctx.acted or job.nodes != node:
                continue
            track = ctx.tracks.get(job.job_id)
            indexes = (track.gpu_index,) if track is not None else tuple(
                i for item in job.gres_detail for i in (item.indexes or ()))
            if int(index) not in indexes:
                continue
            shards = job_shards(job)
            whole = shards is None or wants_whole_gpu(job)
            started = track.started_at if track is not None else (
                job.start_time.timestamp() if job.start_time else ctx.now)
            tenants.append(Tenant(job.job_id, started, total if whole else shards, whole_gpu=whole))
        return GpuShares(label, total, tuple(tenants))

    # ------------------------------------------------------------------ acting
    def _apply(self, ctx: RoundContext, p: Preemptor, d: GrowDecision, mode) -> None:
        actions = ctx.actions
        node, _, index = d.gpu.rpartition(":")
        self._decided.add((p.job_id, p.since))
        evicted = []
        for e in d.evictions:
            victim = ctx.jobs[e.job_id]
            ok = actions.requeue_at_head(victim, EVICT_KIND, e.reason, mode=mode, keep_held=True, grower=p.job_id,
                                         gpu=d.gpu, shares=e.shares, lost_work_s=round(e.lost_work_s, 1),
                                         pair_recorded=False)
            if mode.acts and not ok:
                log.error("job %d: eviction of job %d failed; no restart in place", p.job_id, e.job_id)
                return  # the held ones go back when the grower runs on (see _release_victims)
            if ok:
                actions.state.held_for_grower[e.job_id] = (p.job_id, ctx.now)
                ctx.acted.add(e.job_id)
                evicted.append(e.job_id)
        evidence = {"gpu": d.gpu, "node": node, "from_shards": p.held_shares, "to_shards": d.grower_shares,
                    "evicted": [e.job_id for e in d.evictions], "lost_work_s": round(d.lost_work_s, 1),
                    "running": p.running, "steps": list(d.steps)}
        if not p.running:  # a queued grower: the evictions were the whole action
            actions.ledger.record(KIND, p.job_id, p.since, "enforce" if evicted else "shadow", d.reason, ctx.now,
                                  **evidence)
            return
        job = ctx.jobs[p.job_id]
        t = ctx.tracks.get(p.job_id)
        fp = t.fingerprint if t is not None else None
        gres = gres_text("shard", d.grower_shares, job_gpu_type(job))
        others = self._other_nodes(ctx, node)
        record = comment_mod.render("packed", shards=d.grower_shares, reason="grow-restart", fp=fp)
        done = actions.requeue_at_head(job, RESTART_KIND, d.reason, mode=mode, gres=gres, exclude=others,
                                       comment=record, **evidence)
        actions.ledger.record(KIND, p.job_id, p.since, "enforce" if done else "shadow", d.reason, ctx.now,
                              **evidence)
        if done:
            ctx.acted.add(p.job_id)
            ctx.state.kept_off[p.job_id] = others  # steering keeps the pin until it runs again
            if fp:
                actions.store.remember_size(fp, d.grower_shares, "grow-restart")
            self.queued[p.job_id] = QueuedGrower(node, int(index), ctx.now, p.min_shares, p.max_shares)

    @staticmethod
    def _other_nodes(ctx: RoundContext, node: str) -> frozenset[str]:
        try:
            return frozenset(n.name for n in ctx.actions.runner.nodes() if n.name != node)
        except SlurmError as exc:
            log.warning("no node list (%s): the grower is not pinned to %s", exc, node)
            return frozenset()

    def _skip(self, ctx: RoundContext, p: Preemptor, d: GrowDecision) -> None:
        self._say(ctx, p.job_id, p.since, d.reason, gpu=d.gpu, steps=list(d.steps))

    def _say(self, ctx: RoundContext, job_id: int, run_start: float, reason: str, **data: object) -> None:
        key = (job_id, run_start, reason)
        if key in self._said:
            return
        self._said.add(key)
        ctx.actions.log_event(SKIP_KIND, f"no growth in place: {reason}", job_id, **data)
