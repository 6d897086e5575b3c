"""The replay's event loop: simulated time, a heap of timed job events, and the arrivals.

A job event is ``(time, seq, kind, job, token)``; it is stale (skipped) when the job's
token moved on since it was pushed (the job restarted, changed speed or ended), so a job's
events are never removed from the heap, only outdated. Arrivals are read in submit order
and go before events at the same time only when no event is due first (an event at the
arrival's time runs first). After each step the loop lets the scheduler run when the next
thing to happen is later than now (a pass sees every change made at one instant).
"""
from __future__ import annotations

import heapq
import math
from typing import Callable, Sequence

from simulator.state import Job

FINISH, OOM, WARN, CHECK, PAIR_FAIL, ELIGIBLE = 0, 1, 2, 3, 4, 5  # job event kinds

Handler = Callable[[Job, float], None]


class EventLoop:
    """The heap of job events and the run through them and the arrivals."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int, Job, int]] = []
        self.seq = 0
        self.events = 0  # events handled (stale ones not counted) and arrivals

    def push(self, t: float, kind: int, job: Job, token: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, job, token))

    def run(self, arrivals: Sequence[Job], advance: Callable[[float], None],
            handlers: dict[int, Handler], arrive: Handler,
            settle: Callable[[float], None]) -> None:
        """Play every arrival and event: ``advance(t)`` before each, then its handler (an
        arrival: ``arrive``); ``settle(now)`` when the next one is later than now."""
        ai = 0
        n = len(arrivals)
        heap = self.heap
        pop = heapq.heappop
        while ai < n or heap:
            if heap and (ai >= n or heap[0][0] <= arrivals[ai].submit):
                t, _, kind, job, token = pop(heap)
                advance(t)
                if token == job.token:
                    self.events += 1
                    handlers[kind](job, t)
                now = t
            else:
                job = arrivals[ai]
                ai += 1
                now = job.submit
                advance(now)
                self.events += 1
                arrive(job, now)
            nxt = heap[0][0] if heap else math.inf
            if ai < n:
                nxt = min(nxt, arrivals[ai].submit)
            if nxt > now:
                settle(now)
