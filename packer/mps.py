"""MPS active-thread percentages for jobs sharing one GPU, from their measured utilisation.

One `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` per application (RL resource thesis, TU Munich, 2.3):
complementary jobs, whose needs add up to at most 100 %, each get what they need (measured
utilisation plus headroom) and the spare is shared out evenly, so the sum is exactly 100 %
and no SM sits idle on purpose. Jobs that do not fit together are scaled down in proportion
to their needs, never below `floor_pct`. A job without a measurement counts as needing an
equal share. Whole percentages; the sum never exceeds 100.

The percentages are counted on the device the jobs share through one MPS daemon: a whole
GPU, or a MIG instance that small jobs share through MPS (their threads are the instance's).
A plan names that device by :func:`device_key`.
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

TOTAL = 100


def mps_percentages(
    utilisation: Mapping[Hashable, float | None],
    *,
    headroom: float = 0.10,
    floor_pct: int = 5,
) -> dict[Hashable, int]:
    """Percent of the GPU's threads for each job (keys as given)."""
    if not utilisation:
        return {}
    n = len(utilisation)
    if floor_pct * n > TOTAL:
        floor_pct = TOTAL // n
    fair = TOTAL / n
    need: dict[Hashable, float] = {}
    for key, util in utilisation.items():
        if util is None or not math.isfinite(util):
            need[key] = fair
        else:
            need[key] = min(TOTAL, max(float(floor_pct), util * (1 + headroom)))
    total_need = sum(need.values())
    if total_need <= TOTAL:
        spare = TOTAL - total_need
        raw = {k: v + spare / n for k, v in need.items()}
    else:
        spare_after_floor = TOTAL - floor_pct * n
        over_floor = {k: v - floor_pct for k, v in need.items()}
        scale = spare_after_floor / sum(over_floor.values()) if sum(over_floor.values()) > 0 else 0
        raw = {k: floor_pct + over_floor[k] * scale for k in need}
    return _round_to_total(raw, floor_pct)


def _round_to_total(raw: Mapping[Hashable, float], floor_pct: int) -> dict[Hashable, int]:
    """Largest-remainder rounding: whole percents, each >= floor, sum <= 100."""
    out = {k: max(floor_pct, math.floor(v)) for k, v in raw.items()}
    left = TOTAL - sum(out.values())
    by_remainder = sorted(raw, key=lambda k: (raw[k] - math.floor(raw[k])), reverse=True)
    for key in by_remainder:
        if left <= 0:
            break
        out[key] += 1
        left -= 1
    while sum(out.values()) > TOTAL:  # only when floors forced it: take from the largest
        biggest = max(out, key=out.get)
        out[biggest] -= 1
    return out


def settled_plan(previous: Mapping[K, int] | None, new: Mapping[K, int], min_change: int) -> Mapping[K, int]:
    """The percentages a GPU keeps: `new` when its jobs changed or some job's share moved by
    `min_change` points or more, else `previous`. Utilisation averages move by a point or two
    from round to round; without this, two steps started a round apart would each read a
    different plan, and their percentages together would not add up to 100."""
    if previous is None or set(previous) != set(new):
        return new
    if any(abs(new[k] - previous[k]) >= min_change for k in new):
        return new
    return previous


def device_key(gpu_index: int, instance: str | None = None) -> str:
    """The name a plan gives the device MPS jobs share: their GPU (``"0"``), or their MIG
    instance on it (``instance`` as ``profile@start``: ``"0@3g.40gb@4"``)."""
    return f"{gpu_index}@{instance}" if instance else str(gpu_index)


def device_key_of(gpu_index: int, isolation: str) -> str:
    """:func:`device_key` of an MPS job from its isolation: ``mps:P`` (a whole GPU) or
    ``mps:P@profile@start`` (a MIG instance shared through MPS)."""
    _, sep, instance = isolation.partition("@")
    return device_key(gpu_index, instance if sep else None)
