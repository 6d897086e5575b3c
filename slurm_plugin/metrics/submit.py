"""The helper's submit side: decisions, their latency, the cluster view's age, the mode.

Decisions are counted as they are made (after the answer is on its way to slurmctld),
so the families restart from zero with the process, as Prometheus counters may.
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

#: the shim gives the helper 50 ms by default; most decisions take well under a millisecond
DECISION_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
MODES = ("observe", "advise", "enforce")


class SubmitStateCollector(Collector):
    """Read at scrape time: how old the cluster view is, the mode, the kill switch."""

    def __init__(self, view_taken_at: Callable[[], float | None], mode: Callable[[], str],
                 kill_switch: Path | None, clock: Callable[[], float]):
        self._taken_at = view_taken_at
        self._mode = mode
        self._kill_switch = os.fspath(kill_switch) if kill_switch is not None else None
        self._clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        taken_at = self._taken_at()
        age = math.inf if taken_at is None else max(0.0, self._clock() - taken_at)
        yield GaugeMetricFamily(
            "gpupack_cluster_view_age_seconds",
            "Seconds since the watcher took the cluster view the submit side decides from (+Inf: none yet).",
            value=age,
        )
        mode = GaugeMetricFamily("gpupack_mode", "The packer's mode from gpupack.toml (1 for the one in force).",
                                 labels=["mode"])
        current = self._mode()
        for name in MODES:
            mode.add_metric([name], 1.0 if name == current else 0.0)
        yield mode
        on = self._kill_switch is not None and os.path.exists(self._kill_switch)
        yield GaugeMetricFamily("gpupack_kill_switch", "1 while the kill switch file exists (every job left untouched).",
                                value=1.0 if on else 0.0)


class SubmitMetrics:
    """What the submit side records per decision, on a registry of its own."""

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self.decisions = Counter(
            "gpupack_decisions", "Submit-time decisions by verdict and reason.",
            ["verdict", "reason"], registry=registry,
        )
        self.latency = Histogram(
            "gpupack_submit_decision_seconds",
            "Time the submit side took to decide one job (from the request read to the answer).",
            buckets=DECISION_BUCKETS, registry=registry,
        )

    def observe(self, verdict: str, reason: str, seconds: float) -> None:
        self.decisions.labels(verdict or "-", reason or "-").inc()
        self.latency.observe(seconds)

    def watch_state(self, view_taken_at: Callable[[], float | None], mode: Callable[[], str],
                    kill_switch: Path | None, clock: Callable[[], float]) -> None:
        self.registry.register(SubmitStateCollector(view_taken_at, mode, kill_switch, clock))
