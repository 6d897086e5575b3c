"""Replay a stream of MIG alloc/free requests on one GPU under a placement policy.

An event file holds lines ``alloc ID PROFILE`` and ``free ID`` (blank lines and ``#``
comments are skipped). A ``free`` of an ID that is not allocated (its alloc was rejected)
is ignored. A rejection counts as *fragmentation* when the free memory slices, counted in
total, were at least the profile's placement size.

The ``demand`` policy sees the size mix the node has seen: its allocs so far, each weighing
half as much every ``half_life`` allocs later (history), plus, with ``demand_window``, the
next allocs of the stream as a pending queue (a real node knows its queue; the replay has
none, so the default is history alone).
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

from mig.fsm import PartitionSpace
from mig.policies import choose


@dataclass(frozen=True)
class Event:
    op: str  # "alloc" | "free"
    id: str
    profile: str | None = None


@dataclass(frozen=True)
class SimulationResult:
    requests: int
    rejected: int
    rejected_fragmentation: int
    decisions: int = 0
    decision_seconds: float = 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        return {k: d[k] for k in ("requests", "rejected", "rejected_fragmentation")}


def parse_events(text: str) -> list[Event]:
    """Parse an event file; errors name the line."""
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if parts[0] == "alloc" and len(parts) == 3:
            out.append(Event("alloc", parts[1], parts[2]))
        elif parts[0] == "free" and len(parts) == 2:
            out.append(Event("free", parts[1]))
        else:
            raise ValueError(f"line {n}: {raw.strip()!r}: expected 'alloc ID PROFILE' or 'free ID'")
    return out


def run_events(space: PartitionSpace, events: Sequence[Event], policy: str = "fsm",
               seed: int = 0, demand_window: int = 0, timed: bool = False,
               half_life: float = 50.0) -> SimulationResult:
    """Replay ``events`` from the empty GPU and count rejections."""
    import time

    for e in events:
        if e.op == "alloc" and e.profile not in space.profile_pos:
            space.slot(e.profile or "", -1)  # UnknownProfileError with the valid names
    rng = random.Random(seed)
    alloc_idx = [i for i, e in enumerate(events) if e.op == "alloc"]
    state = space.empty()
    live: dict[str, tuple[str, int]] = {}
    requests = rejected = frag = 0
    decisions = 0
    spent = 0.0
    k = 0  # position in alloc_idx
    decay = 0.5 ** (1.0 / half_life)
    seen: dict[str, float] = {}
    for e in events:
        if e.op == "free":
            held = live.pop(e.id, None)
            if held is not None:
                state = state.free(*held)
            continue
        requests += 1
        demand: Mapping[str, float] | None = None
        if policy == "demand":
            for name in seen:
                seen[name] *= decay
            seen[e.profile] = seen.get(e.profile, 0.0) + 1.0
            demand = Counter(events[i].profile for i in alloc_idx[k + 1:k + 1 + demand_window])
            demand.update(seen)
        k += 1
        if e.id in live:
            raise ValueError(f"alloc of {e.id} while it is still allocated")
        t0 = time.perf_counter() if timed else 0.0
        start = choose(state, e.profile, policy, demand, rng).start
        if timed:
            spent += time.perf_counter() - t0
            decisions += 1
        if start is None:
            rejected += 1
            size = space.catalog.profile(e.profile).memory_slices
            if state.free_memory_slices >= size:
                frag += 1
            continue
        state = state.alloc(e.profile, start)
        live[e.id] = (e.profile, start)
    return SimulationResult(requests, rejected, frag, decisions, spent)


def generate_stream(profiles: Sequence[str], weights: Sequence[float], n_allocs: int,
                    seed: int = 0, mean_live: float = 4.0) -> list[Event]:
    """A random alloc/free stream: each step allocates one request of the mix, then frees
    each live request with probability 1/mean_live (so about ``mean_live`` stay live)."""
    rng = random.Random(seed)
    events: list[Event] = []
    live: list[str] = []
    for i in range(n_allocs):
        jid = f"j{i}"
        events.append(Event("alloc", jid, rng.choices(list(profiles), weights=list(weights))[0]))
        live.append(jid)
        still = []
        for j in live:
            if rng.random() < 1.0 / mean_live:
                events.append(Event("free", j))
            else:
                still.append(j)
        live = still
    return events

