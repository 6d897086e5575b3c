"""Bounds every server of the suite keeps, whoever connects: how many connections at once (in all,
and per caller), one deadline per request (not per read), and a bounded number of log lines
however many connections are refused.

- :class:`ConnectionSlots`: the count of open connections, in all and per key (a uid on a Unix
  socket, which SO_PEERCRED vouches for; never an address); ``reserved`` slots of the
  total are kept for privileged callers (root, the SlurmUser), so a flood by one user never keeps
  slurmstepd's isolation requests out. Pure counting under a lock.
- :class:`AuthenticatedPools` (the network link, where an address proves nothing: on one host every
  user connects from the same one): trust attaches to connections that authenticated, never to
  addresses. An unauthenticated connection holds a slot of a small pool (capped per address too)
  only until it authenticates; when the pool (or its address's share) is full, a new connection
  closes the OLDEST unauthenticated one, so a client that sends its signed head at once gets
  through any flood of slow partial heads. An authenticated connection moves to a pool of its own.
- :class:`DeadlineWatch`: one thread for all of a server's connections; a connection armed with a
  deadline that passes is shut down (``shutdown(SHUT_RDWR)``), which ends whatever read or write
  its handler is blocked in. A slow client thus holds a thread at most one deadline, however it
  trickles its bytes.
- :class:`RefusalCounter`: refusals counted per reason, logged at most once per ``every_s`` per
  reason (with the count since), so a flood costs a bounded number of log lines.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Bounds:
    """One server's bounds."""

    max_total: int  # connections open at once
    max_per_key: int  # of them, one caller's (uid, or peer address before authentication)
    reserved: int  # of max_total, kept for privileged callers
    request_s: float  # one request, read in full (and, where said, answered)
    idle_s: float  # a kept connection waiting for its next request

    def __post_init__(self) -> None:
        if not (0 < self.max_per_key <= self.max_total and 0 <= self.reserved < self.max_total):
            raise ValueError(f"inconsistent bounds {self}")
        if self.request_s <= 0 or self.idle_s <= 0:
            raise ValueError("request_s and idle_s must be positive")


class ConnectionSlots:
    """Open connections, in all and per key (thread-safe)."""

    def __init__(self, bounds: Bounds):
        self.bounds = bounds
        self._per_key: Counter[Hashable] = Counter()
        self._total = 0
        self._lock = threading.Lock()

    def acquire(self, key: Hashable, privileged: bool = False) -> str | None:
        """Take a slot for ``key``; None when taken, else why not (nothing taken)."""
        b = self.bounds
        with self._lock:
            if self._total >= b.max_total:
                return f"{b.max_total} connections open"
            if not privileged and self._total >= b.max_total - b.reserved:
                return f"{b.max_total - b.reserved} connections open (the rest kept for root and the SlurmUser)"
            if not privileged and self._per_key[key] >= b.max_per_key:
                return f"{b.max_per_key} connections of {key} open"
            self._per_key[key] += 1
            self._total += 1
            return None

    def release(self, key: Hashable) -> None:
        with self._lock:
            if self._per_key[key] > 0:
                self._per_key[key] -= 1
                self._total -= 1
                if not self._per_key[key]:
                    del self._per_key[key]

    @property
    def total(self) -> int:
        with self._lock:
            return self._total

    def of(self, key: Hashable) -> int:
        with self._lock:
            return self._per_key[key]


@dataclass(frozen=True)
class PoolBounds:
    """The network link's bounds: unauthenticated and authenticated connections, pooled apart."""

    max_unauthenticated: int  # connections that have not (yet) authenticated, open at once
    max_unauthenticated_per_key: int  # of them, one peer address's
    max_authenticated: int  # connections whose request authenticated (kept for their next ones)
    head_s: float  # a request's head, from its first byte (and a new connection's first byte)
    request_s: float  # the rest of a request once its head is in (verified, read, answered)
    idle_s: float  # a kept connection waiting for its next request

    def __post_init__(self) -> None:
        if not 0 < self.max_unauthenticated_per_key <= self.max_unauthenticated or self.max_authenticated < 0:
            raise ValueError(f"inconsistent bounds {self}")
        if self.head_s <= 0 or self.request_s <= 0 or self.idle_s <= 0:
            raise ValueError("head_s, request_s and idle_s must be positive")


NEW, VERIFYING, AUTHENTICATED = "new", "verifying", "authenticated"


@dataclass
class _Pooled:
    key: Hashable
    sock: socket.socket
    state: str = NEW


class AuthenticatedPools:
    """Open connections of a network server, unauthenticated and authenticated apart (thread-safe).

    The oldest NEW connection (nothing decided of it yet) is evicted first; only when there is none,
    the oldest whose head is being verified (a few ms each: were they kept, a flood of heads bearing
    a genuine credential of uid nobody, refused only once munged has decoded it, could hold every
    slot and shut the helper out). An authenticated connection is never evicted: a new connection
    is always admitted. Evicted sockets are returned, not shut down here: the caller shuts them
    outside the lock."""

    def __init__(self, bounds: PoolBounds):
        self.bounds = bounds
        self._conns: dict[int, _Pooled] = {}  # insertion order is age order: the first NEW is the oldest
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def admit(self, key: Hashable, sock: socket.socket) -> tuple[int, list[socket.socket]]:
        """A ticket for a new connection, and the sockets evicted to make room for it (their
        tickets are gone): ``key``'s oldest when it holds its share, else, when the pool is full,
        the oldest of the key that holds the most."""
        b = self.bounds
        evicted: list[socket.socket] = []
        with self._lock:
            if self._unauthenticated(key) >= b.max_unauthenticated_per_key:
                self._evict(evicted, key)
            if self._unauthenticated() >= b.max_unauthenticated:
                self._evict_from_busiest(evicted)
            ticket = next(self._ids)
            self._conns[ticket] = _Pooled(key, sock)
            return ticket, evicted

    def _unauthenticated(self, key: Hashable | None = None) -> int:
        return sum(1 for c in self._conns.values() if c.state != AUTHENTICATED and (key is None or c.key == key))

    def _evict_from_busiest(self, into: list[socket.socket]) -> None:
        """The pool is full: drop a connection of the key holding the most unauthenticated ones
        (its oldest NEW, else its oldest VERIFYING; among keys holding as many, the oldest NEW of
        all first). A flood from other addresses evicts its own connections, never a lone new one
        of the helper's before it has sent its head."""
        counts: dict[Hashable, int] = {}
        for conn in self._conns.values():
            if conn.state != AUTHENTICATED:
                counts[conn.key] = counts.get(conn.key, 0) + 1
        if not counts:
            return
        most = max(counts.values())
        busiest = {key for key, n in counts.items() if n == most}
        for state in (NEW, VERIFYING):
            for ticket, conn in self._conns.items():
                if conn.state == state and conn.key in busiest:
                    del self._conns[ticket]
                    into.append(conn.sock)
                    return

    def _evict(self, into: list[socket.socket], key: Hashable | None = None) -> None:
        """Drop the oldest NEW connection (of ``key`` when given), else the oldest VERIFYING one."""
        for state in (NEW, VERIFYING):
            for ticket, conn in self._conns.items():
                if conn.state == state and (key is None or conn.key == key):
                    del self._conns[ticket]
                    into.append(conn.sock)
                    return

    def verifying(self, ticket: int) -> bool:
        """Its head is read and being verified: evicted only when no NEW one is left. False when
        it was evicted already."""
        with self._lock:
            conn = self._conns.get(ticket)
            if conn is None:
                return False
            if conn.state == NEW:
                conn.state = VERIFYING
            return True

    def refused(self, ticket: int) -> None:
        """Its credential was refused: evicted first again until it closes."""
        with self._lock:
            conn = self._conns.get(ticket)
            if conn is not None and conn.state == VERIFYING:
                conn.state = NEW

    def authenticated(self, ticket: int) -> bool:
        """Move it to the authenticated pool; False when it was evicted, or that pool is full (then
        it stays VERIFYING until it closes: the caller serves this request and closes it)."""
        with self._lock:
            conn = self._conns.get(ticket)
            if conn is None:
                return False
            if conn.state == AUTHENTICATED:
                return True
            if sum(1 for c in self._conns.values() if c.state == AUTHENTICATED) >= self.bounds.max_authenticated:
                return False
            conn.state = AUTHENTICATED
            return True

    def release(self, ticket: int) -> None:
        with self._lock:
            self._conns.pop(ticket, None)

    def evicted(self, ticket: int) -> bool:
        with self._lock:
            return ticket not in self._conns

    def count(self, state: str | None = None) -> int:
        with self._lock:
            return sum(1 for c in self._conns.values() if state is None or c.state == state)


class DeadlineWatch:
    """Shuts down each armed socket whose deadline passed (one thread for a whole server)."""

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, socket.socket] = {}
        self._fired: set[int] = set()  # tokens whose deadline shut their socket, until disarmed
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self.expired = 0
        self._thread = threading.Thread(target=self._run, name=f"{name}-deadlines", daemon=True)
        self._thread.start()

    def arm(self, sock: socket.socket, seconds: float) -> int:
        """Shut ``sock`` down in ``seconds`` unless disarmed first; a token for :meth:`disarm`."""
        token = next(self._ids)
        with self._cond:
            self._armed[token] = sock
            heapq.heappush(self._heap, (self.clock() + seconds, token))
            self._cond.notify()
        return token

    def disarm(self, token: int) -> None:
        with self._cond:
            self._armed.pop(token, None)
            self._fired.discard(token)

    def fired(self, token: int) -> bool:
        """Whether ``token``'s deadline passed and shut its socket (until it is disarmed)."""
        with self._cond:
            return token in self._fired

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                at, token = self._heap[0]
                left = at - self.clock()
                if left > 0:
                    self._cond.wait(min(left, 1.0))
                    continue
                heapq.heappop(self._heap)
                sock = self._armed.pop(token, None)
                if sock is not None:
                    self._fired.add(token)
            if sock is not None:
                self.expired += 1
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    @property
    def armed(self) -> int:
        with self._cond:
            return len(self._armed)


class RefusalCounter:
    """Refusals per reason, logged at most once per ``every_s`` per reason."""

    def __init__(self, logger: logging.Logger, what: str, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.what = what
        self.every_s = every_s
        self.clock = clock
        self.counts: Counter[str] = Counter()
        self._since: Counter[str] = Counter()
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def refused(self, reason: str, detail: str) -> None:
        with self._lock:
            self.counts[reason] += 1
            self._since[reason] += 1
            now = self.clock()
            last = self._last.get(reason)
            if last is not None and now - last < self.every_s:
                return
            self._last[reason] = now
            count, self._since[reason] = self._since[reason], 0
        self.logger.warning("%s: refused (%s): %s%s", self.what, reason, detail,
                            f" ({count} such refusals since the last line)" if count > 1 else "")
