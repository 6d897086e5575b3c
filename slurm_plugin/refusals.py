"""Bounded for every caller: refusals counted, their log lines rate-limited, requests limited
per user. Used by the helper's socket; meant for every server a local user can reach (the node
agents' too).

- `RefusalLog.refused(reason, uid, detail)` counts one refused connection or bad request in
  `gpupack_refused_requests_total{reason}` and logs it, at most `lines_per_min` lines a
  minute per reason; what is held back is summed in the next line that gets through ("and 297
  more like it in the last 60 s"). 300 refused connections from `nobody` write a handful of
  lines, never 300.
- `UserLimits.allow(uid)` is a token bucket per user: `rate` requests a second on average,
  `burst` at once; a user over it is refused (reason `rate-limited`) until the bucket refills.
  Buckets of users not seen for a while are dropped (the map stays bounded).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter

WINDOW_S = 60.0
IDLE_BUCKET_S = 600.0  # a user's bucket is forgotten after this long without a request
MAX_BUCKETS = 10_000  # and never more than this many are kept


@dataclass
class _Window:
    started: float
    lines: int = 0
    held_back: int = 0


class RefusalLog:
    """Counts refusals by reason (a Prometheus counter) and logs them at a bounded rate."""

    def __init__(self, logger: logging.Logger, registry: CollectorRegistry | None = None, *,
                 lines_per_min: int = 10, clock: Callable[[], float] = time.monotonic):
        self._log = logger
        self._lines = max(1, lines_per_min)
        self._clock = clock
        self._windows: dict[str, _Window] = {}
        self.counter = Counter("gpupack_refused_requests", "Connections and requests refused (not allowed, "
                               "malformed, too large, too many), by reason.", ["reason"],
                               registry=registry)
        self.total = 0

    def refused(self, reason: str, uid: int | None, detail: str) -> None:
        self.total += 1
        self.counter.labels(reason).inc()
        now = self._clock()
        window = self._windows.get(reason)
        if window is None or now - window.started >= WINDOW_S:
            held = window.held_back if window is not None else 0
            window = self._windows[reason] = _Window(now)
            if held:
                detail = f"{detail} (and {held} more refused as {reason} in the last {WINDOW_S:.0f} s)"
        if window.lines >= self._lines:
            window.held_back += 1
            return
        window.lines += 1
        last = window.lines == self._lines
        self._log.warning("refused (%s) uid %s: %s%s", reason, "?" if uid is None else uid, detail,
                          f"; further {reason} refusals this minute are only counted "
                          "(gpupack_refused_requests_total)" if last else "")


class UserLimits:
    """A token bucket per user: at most `rate` requests a second on average, `burst` at once."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate = rate
        self.burst = max(1, burst)
        self._clock = clock
        self._buckets: dict[Hashable, tuple[float, float]] = {}  # uid (or (peer, submitter)) -> (tokens, when)

    def allow(self, uid: Hashable) -> bool:
        if self.rate <= 0:
            return True  # 0: no limit
        now = self._clock()
        tokens, when = self._buckets.get(uid, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - when) * self.rate)
        allowed = tokens >= 1.0
        self._buckets[uid] = (tokens - 1.0 if allowed else tokens, now)
        if len(self._buckets) > MAX_BUCKETS:
            self._forget(now)
        return allowed

    def _forget(self, now: float) -> None:
        for uid, (_, when) in list(self._buckets.items()):
            if now - when > IDLE_BUCKET_S:
                del self._buckets[uid]
        while len(self._buckets) > MAX_BUCKETS:  # all recent: drop the oldest
            del self._buckets[min(self._buckets, key=lambda u: self._buckets[u][1])]

    def __len__(self) -> int:
        return len(self._buckets)
