"""The metrics watch on its own: each round is counted and metrics.prom, beside the database,
holds the event log's counters for node_exporter's textfile collector (our families only)."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.unit.helper.rounds_support import make
from tests.unit.helper.watches.watch_support import context


def test_each_round_is_counted_and_the_textfile_holds_the_event_counters(tmp_path):
    _, helper, _, monitor = make(tmp_path, fixed_clock=True)
    helper.store.log_event("requeue-contention", "x", 1)
    watch = monitor.metrics_watch
    watch.round(context(monitor))
    watch.round(context(monitor))
    assert watch.rounds == 2
    written = {f.name: f for f in text_string_to_metric_families((tmp_path / "metrics.prom").read_text())}
    requeues = {s.labels["kind"]: s.value for s in written["gpupack_requeues"].samples if s.name.endswith("_total")}
    assert requeues["contention"] == 1
    assert written["gpupack_monitor_rounds"].samples[0].value == 2
    assert all(name.startswith("gpupack_") for name in written)


def test_a_store_in_memory_leaves_no_file(tmp_path):
    from store.db import Store

    _, helper, _, monitor = make(tmp_path, fixed_clock=True)
    monitor.store = Store()
    monitor.metrics_watch.round(context(monitor))
    assert monitor.metrics_watch.rounds == 1 and not (tmp_path / "metrics.prom").exists()
