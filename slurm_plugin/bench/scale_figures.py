"""The scale bench's arithmetic: slurmctld's RPC statistics from `sdiag`, their difference over
a window, the suite's share of slurmctld's time, latency ratios and percentiles (pure).

`sdiag`'s text is read per line: "Remote Procedure Call statistics by message type" and "by
user" list one RPC type (or user) a line as ``NAME ( id) count:N ave_time:N total_time:N``,
times in microseconds (22.05, 24.11 and 26.05 alike; recorded in tests/data/slurm/). A line
of those sections that does not read so is counted in ``unread``, never guessed at.
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field

_RPC_LINE = re.compile(r"^\s*(?P<name>\S+)\s*\(\s*(?P<id>\d+)\)\s+count:\s*(?P<count>\d+)\s+ave_time:\s*(?P<ave>\d+)"
                       r"\s+total_time:\s*(?P<total>\d+)\s*$")
_SECTIONS = {"Remote Procedure Call statistics by message type": "types",
             "Remote Procedure Call statistics by user": "users"}


@dataclass(frozen=True)
class RpcStat:
    count: int
    total_us: int


@dataclass
class Sdiag:
    """One `sdiag` reading: RPC counts and total time by message type and by user."""

    types: dict[str, RpcStat] = field(default_factory=dict)
    users: dict[str, RpcStat] = field(default_factory=dict)
    unread: int = 0  # lines of the RPC sections that did not parse

    @property
    def total_us(self) -> int:
        return sum(s.total_us for s in self.types.values())

    @property
    def count(self) -> int:
        return sum(s.count for s in self.types.values())


def parse_sdiag(text: str) -> Sdiag:
    out = Sdiag()
    section: str | None = None
    for line in text.splitlines():
        head = line.strip()
        if not head:
            continue
        if head in _SECTIONS:
            section = _SECTIONS[head]
            continue
        if not line[:1].isspace():  # a heading of another section
            section = None
            continue
        if section is None:
            continue
        match = _RPC_LINE.match(line)
        if match is None:
            out.unread += 1
            continue
        getattr(out, section)[match["name"]] = RpcStat(int(match["count"]), int(match["total"]))
    return out


def rpc_delta(before: Sdiag, after: Sdiag) -> Sdiag:
    """What happened between two readings (a type whose count went down was reset between
    them: its reading after is the window's)."""
    def diff(a: dict[str, RpcStat], b: dict[str, RpcStat]) -> dict[str, RpcStat]:
        out = {}
        for name, late in b.items():
            early = a.get(name, RpcStat(0, 0))
            if late.count < early.count or late.total_us < early.total_us:
                early = RpcStat(0, 0)
            if late.count - early.count:
                out[name] = RpcStat(late.count - early.count, late.total_us - early.total_us)
        return out

    return Sdiag(diff(before.types, after.types), diff(before.users, after.users), before.unread + after.unread)


def share_pct(with_suite: Sdiag, without: Sdiag, window_s: float) -> float:
    """slurmctld's RPC time with the suite less without it, over the window's wall time, in %."""
    if window_s <= 0:
        raise ValueError(f"a window of {window_s} s")
    return (with_suite.total_us - without.total_us) / 1e6 / window_s * 100


def percentile(values: list[float], q: float) -> float:
    """The value at rank ``q`` (0..1) of ``values`` (nearest rank); nan for none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def ratio(with_suite: float, without: float) -> float:
    """with / without; nan when either is missing or `without` is 0."""
    if not (math.isfinite(with_suite) and math.isfinite(without)) or without == 0:
        return math.nan
    return with_suite / without


def rpc_rows(with_suite: Sdiag, without: Sdiag, window_s: float) -> list[dict]:
    """One row per RPC type seen in either window: counts, total and mean time, per second."""
    rows = []
    for name in sorted(set(with_suite.types) | set(without.types),
                       key=lambda n: -(with_suite.types.get(n, RpcStat(0, 0)).total_us)):
        w, wo = with_suite.types.get(name, RpcStat(0, 0)), without.types.get(name, RpcStat(0, 0))
        rows.append({"rpc": name, "count_with": w.count, "count_without": wo.count,
                     "total_ms_with": round(w.total_us / 1000, 1), "total_ms_without": round(wo.total_us / 1000, 1),
                     "mean_ms_with": round(w.total_us / w.count / 1000, 3) if w.count else None,
                     "mean_ms_without": round(wo.total_us / wo.count / 1000, 3) if wo.count else None,
                     "per_s_with": round(w.count / window_s, 2), "per_s_without": round(wo.count / window_s, 2)})
    return rows


def prometheus_value(text: str, name: str, labels: dict[str, str] | None = None) -> float | None:
    """One sample of a Prometheus text exposition (the sum over samples of ``name`` whose labels
    include ``labels``); None when there is none."""
    from prometheus_client.parser import text_string_to_metric_families

    found = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in (labels or {}).items()):
                found = (found or 0.0) + sample.value
    return found
