"""Contention after a pack (US 2025/0265126 A1, FIG. 4), as a pure function.

The jobs sharing a GPU are compared with their throughput before the newest job joined.
When a pre-existing job has lost more than ``threshold`` (10 %) of it, the newest job is
the one to requeue (at the head of the queue), and each pair (newest, hurt job) is to be
kept apart from now on. The job that arrived last pays, never a senior one.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from packer.corunner import pair_key


@dataclass(frozen=True)
class Sharer:
    """A job on a shared GPU: its throughput before the newest job joined, and now."""

    job_id: str
    workload: str
    started_at: float
    baseline_throughput: float | None
    throughput: float | None


@dataclass(frozen=True)
class ContentionVerdict:
    requeue: str | None  # job id to requeue at the head; None: leave everything running
    hurt: tuple[str, ...]  # pre-existing jobs that lost more than the threshold
    avoid_pairs: tuple[tuple[str, str], ...]  # workload pairs to keep apart
    reason: str


def throughput_loss(baseline: float | None, now: float | None) -> float | None:
    """The fraction of ``baseline`` lost (0.2 = 20 % slower); None when unknown."""
    if baseline is None or now is None or baseline <= 0:
        return None
    return max(0.0, 1.0 - now / baseline)


def check_contention(sharers: Sequence[Sharer], threshold: float = 0.10) -> ContentionVerdict:
    """Decide whether the newest job on a GPU must go. Never raises."""
    if len(sharers) < 2:
        return ContentionVerdict(None, (), (), "alone")
    newest = max(sharers, key=lambda s: (s.started_at, s.job_id))
    hurt: list[tuple[Sharer, float]] = []
    unknown = 0
    for s in sharers:
        if s is newest:
            continue
        loss = throughput_loss(s.baseline_throughput, s.throughput)
        if loss is None:
            unknown += 1
        elif loss > threshold:
            hurt.append((s, loss))
    if not hurt:
        note = f"; {unknown} without a throughput" if unknown else ""
        return ContentionVerdict(None, (), (), f"within {threshold:.0%}{note}")
    worst, loss = max(hurt, key=lambda h: h[1])
    pairs = tuple(sorted({pair_key(newest.workload, s.workload) for s, _ in hurt}))
    reason = (f"job {worst.job_id} lost {loss:.0%} throughput (> {threshold:.0%}) after job "
              f"{newest.job_id} joined: requeue {newest.job_id} at the head, avoid the pair")
    return ContentionVerdict(newest.job_id, tuple(s.job_id for s, _ in hurt), pairs, reason)
