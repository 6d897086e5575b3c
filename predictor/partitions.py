"""Choosing a partition size: the smallest that holds a memory need."""
from __future__ import annotations

__all__ = ["next_partition_for"]


def next_partition_for(need_bytes: float, partition_sizes: tuple[int, ...] | None) -> int | None:
    """Smallest size in ``partition_sizes`` that holds ``need_bytes``; None when none does."""
    if not partition_sizes:
        return None
    for size in sorted(partition_sizes):
        if size >= need_bytes:
            return int(size)
    return None
