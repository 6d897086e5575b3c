"""Contention: a newcomer that slows a job already on its GPU.

Per shared GPU, `packer.contention.find_contention` (through `ctx.rules.contention`); the
newcomer is requeued at the head of the queue and each (newcomer, hurt job) pair of
fingerprints is recorded so they are never packed together again.

A job whose utilisation the GPU's counters could not give (its samples' ``util_source`` is
``unavailable: <reason>: <why>``) is judged only by what it reports, never by a guessed
utilisation; the node says so once per (node, GPU, reason): a ``counters-unavailable`` event
(the agent's metric ``gpupack_gpu_util_counters_unavailable`` counts such jobs each round).

Every senior measured after a newcomer joined (hurt or not, `ctx.rules.measure`) is recorded
once per pack in the store's `pair_speeds` as its speed beside the newcomer (after / before):
what the steering's pair knowledge learns from. Measures are recorded whatever the action's
mode (they act on no job).
"""
from __future__ import annotations

import logging

from packer.contention import Resident
from packer.samples import UNAVAILABLE, unavailable_reason
from slurm_plugin.helper.watches.round import RoundContext
from slurm_plugin.helper.watches.tracks import Track
from slurm_plugin.slurm.gres import expand_hostlist

log = logging.getLogger(__name__)

KIND = "requeue-contention"
BLIND = "counters-unavailable"


class ContentionWatch:
    name = "contention"

    def __init__(self) -> None:
        self._blind_said: set[tuple[str, int, str]] = set()  # (node, GPU, reason) told once

    def round(self, ctx: RoundContext) -> None:
        self._say_blind(ctx)
        by_gpu = self._residents(ctx, ctx.acted)
        self._record_pair_speeds(ctx, by_gpu)
        if ctx.actions.mode_of(KIND).mode != "off":
            ctx.acted |= self._check_contention(ctx, by_gpu)

    def _say_blind(self, ctx: RoundContext) -> None:
        """One event per (node, GPU, reason) where the GPU's counters give no utilisation."""
        for t in ctx.tracks.values():
            last = t.samples[-1] if t.samples else None
            reason = unavailable_reason(last.util_source) if last is not None else None
            if reason is None or (key := (t.node, t.gpu_index, reason)) in self._blind_said:
                continue
            self._blind_said.add(key)
            why = last.util_source[len(UNAVAILABLE):]
            ctx.actions.log_event(
                BLIND, f"{t.node} GPU {t.gpu_index}: no utilisation counters for its jobs ({why}); contention "
                       f"there is judged only from what jobs report", t.job_id, node=t.node, gpu=t.gpu_index,
                reason=reason)

    @staticmethod
    def _residents(ctx: RoundContext, skip: set[int]) -> dict[tuple[str, int], list[Resident]]:
        """The running packed jobs of each shared GPU. A job's reported throughput is
        preferred; without it, its utilisation as the GPU's counters measured it."""
        jobs = ctx.jobs
        by_gpu: dict[tuple[str, int], list[Track]] = {}
        for t in ctx.tracks.values():
            job = jobs.get(t.job_id)
            if job is None or job.state != "RUNNING" or not t.packed or t.job_id in skip or t.gpu_index < 0:
                continue
            by_gpu.setdefault((t.node, t.gpu_index), []).append(t)
        return {key: [Resident(t.job_id, t.started_at, t.throughput(), t.fingerprint,
                               utilisation=tuple((x.at, x.util_pct) for x in t.samples if x.counted))
                      for t in tracks]
                for key, tracks in by_gpu.items() if len(tracks) > 1}

    @staticmethod
    def _record_pair_speeds(ctx: RoundContext, by_gpu: dict[tuple[str, int], list[Resident]]) -> None:
        done = ctx.state.pairs_measured
        tracks = ctx.tracks
        done -= {k for k in done if not all(  # both runs still tracked, else forgotten
            (t := tracks.get(job_id)) is not None and t.started_at == start for job_id, start in (k[:2], k[2:]))}
        for (node, _gpu), residents in by_gpu.items():
            if node in ctx.stale_nodes:
                continue  # no pair speed is learnt from stale figures
            pack = ctx.rules.measure(residents)
            if pack is None or not pack.newcomer.fingerprint:
                continue
            new = pack.newcomer
            for m in pack.seniors:
                senior_start = next(r.started_at for r in residents if r.job_id == m.job_id)
                key = (m.job_id, senior_start, new.job_id, new.started_at)
                if key in done or not m.fingerprint:
                    continue
                done.add(key)
                row = ctx.actions.store.pairs.record_pair_speed(m.fingerprint, new.fingerprint, m.speed)
                log.info("job %d (%s) runs at %.2f of its %s beside job %d (%s); pair mean %.2f over %d",
                         m.job_id, m.fingerprint, m.speed, m.signal, new.job_id, new.fingerprint,
                         row.speed, row.samples)

    def _check_contention(self, ctx: RoundContext, by_gpu: dict[tuple[str, int], list[Resident]]) -> set[int]:
        jobs = ctx.jobs
        acted: set[int] = set()
        rules = ctx.rules
        actions = ctx.actions
        mode = actions.mode_of(KIND)
        for (node, gpu), residents in sorted(by_gpu.items()):
            verdict = rules.contention(residents)
            if verdict is None:
                continue
            newcomer = jobs[verdict.newcomer]
            if actions.on_stale_node(newcomer, KIND, verdict.reason):
                continue  # judged again when its node's figures are fresh
            started_at = ctx.tracks[newcomer.job_id].started_at
            if not actions.first_report(newcomer.job_id, started_at):
                continue
            for hurt in verdict.hurt:
                # two copies of one workload that slow each other are a pair too (fp, fp): without
                # it, each next copy lands beside the running one and is requeued again
                if mode.acts and verdict.newcomer_fingerprint and hurt.fingerprint:
                    actions.store.pairs.avoid_pair(verdict.newcomer_fingerprint, hurt.fingerprint, verdict.reason)
            hurt_nodes = frozenset(n for h in verdict.hurt for n in expand_hostlist(jobs[h.job_id].nodes))
            evidence = {
                "node": node, "gpu": gpu, "threshold": rules.contention_threshold, "settle_s": rules.settle_s,
                "min_after": rules.min_samples_after,
                "hurt": [{"job_id": h.job_id, "before": h.before, "after": h.after, "loss": h.loss, "signal": h.signal}
                         for h in verdict.hurt],
            }
            if actions.decide(
                KIND, newcomer, verdict.reason, run_start=started_at, evidence=evidence, at=ctx.now, mode=mode,
                exclude=hurt_nodes, node=node, gpu=gpu, hurt=[h.job_id for h in verdict.hurt],
                fingerprint=verdict.newcomer_fingerprint,
                avoided=[h.fingerprint for h in verdict.hurt], signals=[h.signal for h in verdict.hurt],
            ):
                acted.add(newcomer.job_id)
        return acted
