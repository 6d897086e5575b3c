"""Metrics: the watcher's Prometheus registry (`slurm_plugin.metrics.watcher`: the event
log's counters and the monitor's own state), served by the Watcher and written each round
to metrics.prom beside the database for node_exporter's textfile collector. Decisions are
counted where they are made: the submit side (`slurm_plugin.metrics.submit`)."""
from __future__ import annotations

import logging
from pathlib import Path

from slurm_plugin.helper.watches.round import RoundContext

log = logging.getLogger(__name__)


class MetricsWatch:
    """Counts rounds; writes the metrics file."""

    name = "metrics"

    def __init__(self, monitor):
        self._monitor = monitor  # what the collectors read: store, rounds, tracks, _heading
        self._metrics = None
        self.rounds = 0

    def round(self, ctx: RoundContext) -> None:
        self.rounds += 1
        self._write_metrics()

    def metrics_registry(self):
        """The watcher's Prometheus registry (served by the Watcher, written each round)."""
        return self._watcher_metrics().served

    def _watcher_metrics(self):
        if self._metrics is None:
            from slurm_plugin.metrics.watcher import WatcherMetrics

            self._metrics = WatcherMetrics(self._monitor)
        return self._metrics

    def metrics_text(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.metrics_registry()).decode()

    def _write_metrics(self) -> None:
        """metrics.prom beside the database, for node_exporter's textfile collector."""
        store = self._monitor.store
        if store.path == ":memory:":
            return
        try:
            self._watcher_metrics().write_textfile(Path(store.path).with_name("metrics.prom"))
        except (OSError, ValueError) as exc:
            log.debug("metrics file not written: %s", exc)
