"""Time-integrated use of the cluster: GPUs busy, compute used, memory held, and a timeline.

The loop calls :meth:`UsageMeter.advance` before each event and :meth:`UsageMeter.gpu_changed`
after anything changes on a GPU; the areas divided by the span give the summary's
``gpu_alloc``, ``gpu_util`` and ``gpu_mem_util``.
"""
from __future__ import annotations

from simulator.state import Gpu


class UsageMeter:
    def __init__(self, timeline_step_s: float):
        self.step = timeline_step_s
        self.busy_n = 0  # GPUs with a job now
        self.util_sum = 0.0  # compute used now, in GPUs
        self.mem_sum = 0.0  # memory held now (each job's mean), bytes
        self.busy_area = self.util_area = self.mem_area = 0.0
        self.last_t = 0.0
        self.timeline: list[tuple[float, int, float, float]] = []
        self._next_tl = 0.0

    def advance(self, now: float) -> None:
        dt = now - self.last_t
        if dt > 0:
            self.busy_area += self.busy_n * dt
            self.util_area += self.util_sum * dt
            self.mem_area += self.mem_sum * dt
            self.last_t = now
        if now >= self._next_tl:
            self.timeline.append((now, self.busy_n, self.util_sum, self.mem_sum))
            self._next_tl = now + self.step

    def gpu_changed(self, g: Gpu, was_busy: bool) -> None:
        busy = bool(g.jobs)
        if busy != was_busy:
            self.busy_n += 1 if busy else -1
        u = 0.0
        m = 0.0
        for j in g.jobs:
            u += j.util * j.rate / 100.0
            m += (j.mem0 + j.mem1) / 2
        u = min(1.0, u)
        self.util_sum += u - g.util_c
        self.mem_sum += m - g.mem_c
        g.util_c = u
        g.mem_c = m
