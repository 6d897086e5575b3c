"""The narrow handles the replay's parts are given instead of the whole engine."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simulator.state import Gpu, Job


@dataclass(frozen=True)
class JobMoves:
    """What a part may do to a running job: take it off its GPU (the work of its attempt
    lost), send it back to the head of the queue (taken off first), or start it on
    ``shares`` of a GPU holding ``mem`` bytes for it."""

    stop: Callable[[Job, float], None]
    requeue: Callable[[Job, float], None]
    start_shared: Callable[[Job, Gpu, float, int, int], None]  # (job, gpu, now, mem, shares)
