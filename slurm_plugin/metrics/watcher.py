"""The helper's watcher: what it did to running jobs, counted from the event log.

The event log (SQLite, written by the watcher and the epilog) is the one record of every
requeue, restart, layout change and shadow decision, so the counters survive a restart
of the helper and agree with `gpupack events`. Only rows added since the last scrape are
read (by id), so a scrape costs the same with a million events as with ten.
"""
from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from slurm_plugin.metrics.config_file import ConfigFileCollector
from slurm_plugin.metrics.endpoint import new_registry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ActionKind:
    """A run-time action's event kind, and the family its enforced occurrences count in."""

    family: str  # requeues | restarts
    label: str  # the `kind` label in that family


#: event kind -> how it is counted: each is one job requeued or restarted by a run-time
#: action (a regroup plan in shadow mode moves nothing: its decision is the `regroup-plan`
#: event, counted in gpupack_events_total)
ACTIONS: dict[str, ActionKind] = {
    "requeue-contention": ActionKind("requeues", "contention"),
    "requeue-quirk": ActionKind("requeues", "gpu-shard-collision"),
    "restart-memory": ActionKind("restarts", "memory"),
    "restart-oom": ActionKind("restarts", "oom"),  # ran out of memory in its share, requeued bigger
    "grow-evict": ActionKind("requeues", "grow-evict"),  # a younger neighbour evicted for a grower
    "grow-restart": ActionKind("restarts", "grow"),  # the grower, restarted bigger in place
    "regroup-requeue": ActionKind("requeues", "regroup"),  # moved to free GPUs for the head
}


def is_shadow(detail: str, data: dict) -> bool:
    """Whether an action event records what *would* have been done (observe/advise/shadow)."""
    return bool(data.get("shadow")) or data.get("mode") == "shadow" or detail.startswith("would ")


@dataclass
class EventTotals:
    """Running totals over the event log, from row 1 to `last_id`."""

    last_id: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    actions: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, shadow|enforce)
    layout_changes: int = 0

    def add(self, kind: str, detail: str, data: dict) -> None:
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
        if kind in ACTIONS:
            key = (kind, "shadow" if is_shadow(detail, data) else "enforce")
            self.actions[key] = self.actions.get(key, 0) + 1
        if kind == "mig-reconfigure":
            self.layout_changes += len(data.get("changes") or ())


class EventLogCollector(Collector):
    """gpupack_requeues_total, gpupack_restarts_total, gpupack_actions_total, ... from SQLite."""

    def __init__(self, store):
        self._store = store
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self.totals = EventTotals()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:  # a read connection of its own: scrapes come from other threads
            self._conn = self._store.reader()
        return self._conn

    def refresh(self) -> EventTotals:
        with self._lock:
            try:
                rows = self._store.events_after(self.totals.last_id, self._connection())
            except sqlite3.Error as exc:
                log.warning("metrics: cannot read the event log: %s", exc)
                return self.totals
            for row_id, kind, detail, data in rows:
                try:
                    parsed = json.loads(data or "{}")
                except ValueError:
                    parsed = {}
                self.totals.add(kind or "", detail or "", parsed if isinstance(parsed, dict) else {})
                self.totals.last_id = row_id
            return self.totals

    def collect(self) -> Iterator[Metric]:
        t = self.refresh()
        families = {
            "requeues": CounterMetricFamily("gpupack_requeues", "Jobs the watcher requeued at the head of the "
                                            "queue, by why (enforced only).", labels=["kind"]),
            "restarts": CounterMetricFamily("gpupack_restarts", "Jobs the watcher restarted on another size, "
                                            "by why (enforced only).", labels=["kind"]),
        }
        actions = CounterMetricFamily("gpupack_actions", "Run-time actions by action and mode: shadow (what would "
                                      "have been done, logged only) or enforce.", labels=["action", "mode"])
        failures = CounterMetricFamily("gpupack_action_failures", "Actions Slurm refused (the job was left as "
                                       "it was).", labels=["action"])
        for kind, how in ACTIONS.items():
            families[how.family].add_metric([how.label], t.actions.get((kind, "enforce"), 0))
            for mode in ("shadow", "enforce"):
                actions.add_metric([kind, mode], t.actions.get((kind, mode), 0))
            failures.add_metric([kind], t.by_kind.get(kind + "-failed", 0))
        yield from families.values()
        yield actions
        yield failures
        yield CounterMetricFamily("gpupack_mig_layout_changes", "MIG instances the queue-following layout "
                                  "created or destroyed on idle slices (events mig-reconfigure).",
                                  value=t.layout_changes)
        yield CounterMetricFamily("gpupack_history_records", "Finished runs written to the history.",
                                  value=t.by_kind.get("history", 0))
        yield CounterMetricFamily("gpupack_steering_changes", "Changes to pending packed jobs' excluded nodes "
                                  "(avoided partners, GPU collisions).", value=t.by_kind.get("steer", 0))
        yield _by_kind(t.by_kind)


def _by_kind(by_kind: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily("gpupack_events", "Rows in the event log, by kind.", labels=["kind"])
    for kind, n in sorted(by_kind.items()):
        family.add_metric([kind], n)
    return family


class MonitorCollector(Collector):
    """The monitor's own state: rounds, tracked jobs, jobs kept at the head."""

    def __init__(self, monitor):
        self._monitor = monitor

    def collect(self) -> Iterator[Metric]:
        m = self._monitor
        yield CounterMetricFamily("gpupack_monitor_rounds", "Monitor rounds since the watcher started.",
                                  value=m.rounds)
        yield GaugeMetricFamily("gpupack_monitor_tracked_jobs", "Running jobs the monitor has samples of.",
                                value=len(m.tracks))
        yield GaugeMetricFamily("gpupack_jobs_at_head", "Requeued jobs being kept at the head of the queue.",
                                value=len(m._heading))
        disagree = GaugeMetricFamily("gpupack_node_disagrees", "1 for each way a node's agent disagrees with "
                                     "the helper (shares per GPU, GPU type, versions): not packed onto.",
                                     labels=["node", "why"])
        for node, reasons in sorted(getattr(getattr(m, "agreement", None), "disagree", {}).items()):
            for why in reasons:
                disagree.add_metric([node, why], 1)
        yield disagree
        yield from _load_families(getattr(m, "load", None))
        yield GaugeMetricFamily("gpupack_actions_halted", "1 while the kill switch file exists: the watcher "
                                "does nothing to jobs but keep packed jobs isolated.", value=int(m.kill_switch.on))


def _load_families(load) -> Iterator[Metric]:
    """The rounds' cost (`helper.round_load.RoundLoad`): what a site and `gpupack bench scale` read."""
    if load is None:
        return
    for name, value, text in (
            ("round_seconds", load.round_s, "The last watcher round's own time."),
            ("cycle_seconds", load.cycle_s, "The last round plus its pause: how often rounds come."),
            ("slurm_query_seconds", load.slurm_s, "The last round's time in Slurm commands (queue, nodes, actions)."),
            ("queue_read_seconds", load.queue_s, "The last queue read's time in Slurm commands.")):
        if value is not None:
            yield GaugeMetricFamily(f"gpupack_watcher_{name}", text, value=value)
    yield GaugeMetricFamily("gpupack_watcher_stretched", "1 while rounds come slower than [monitor] interval_s "
                            "(slurmctld slow or a long queue).", value=int(load.stretched))
    yield CounterMetricFamily("gpupack_watcher_stretched_episodes", "Runs of stretched rounds since the start.",
                              value=load.episodes)
    reads = CounterMetricFamily("gpupack_watcher_queue_reads", "Queue reads by kind: json (the whole queue), "
                                "formatted, changes (the jobs whose state changed, read by id), unchanged (slurmctld's job "
                                "states showed no change).", labels=["kind"])
    for kind in ("json", "formatted", "changes", "unchanged"):
        reads.add_metric([kind], load.reads.get(kind, 0))
    yield reads
    yield CounterMetricFamily("gpupack_watcher_queue_records_skipped", "Queue records refused (unreadable "
                              "or hostile text) and left out.", value=load.skipped_records)


class WatcherMetrics:
    """The watcher's families, in two registries: the one its endpoint serves (with the
    standard process_* families) and the one written to metrics.prom for node_exporter's
    textfile collector (gpupack_* only: node_exporter has process_* families of its own)."""

    def __init__(self, monitor):
        collectors: tuple[Collector, ...] = (EventLogCollector(monitor.store), MonitorCollector(monitor))
        if getattr(monitor, "settings_file", None) is not None:
            collectors += (ConfigFileCollector(monitor.settings_file),)
        self.served = new_registry()
        self.textfile = CollectorRegistry(auto_describe=True)
        for collector in collectors:
            self.served.register(collector)
            self.textfile.register(collector)

    def write_textfile(self, path: Path) -> None:
        write_to_textfile(str(path), self.textfile)
