"""The Grafana dashboard and the alert rules in etc/: well formed, and every gpupack_ series
they query is one the daemons really expose."""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpus.sim.backend import SimGpuBackend
from store.db import Store
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.helper.kill_switch import KillSwitch
from slurm_plugin.metrics.agent import agent_registry
from slurm_plugin.metrics.config_file import ConfigFileCollector
from slurm_plugin.metrics.endpoint import new_registry
from slurm_plugin.metrics.submit import SubmitMetrics
from slurm_plugin.refusals import RefusalLog
from slurm_plugin.metrics.watcher import EventLogCollector, MonitorCollector

ETC = Path(__file__).resolve().parents[3] / "etc"
DASHBOARD = ETC / "grafana" / "gpupack-dashboard.json"
ALERTS = ETC / "prometheus" / "gpupack-alerts.yml"
PANEL_TYPES = {"row", "timeseries", "stat", "bargauge", "table", "gauge", "piechart"}


class FakeSettingsFile:
    refused, refusals = None, 0


class FakeMonitor:
    rounds, tracks, _heading = 0, {}, {}
    kill_switch = KillSwitch(None)


@pytest.fixture(scope="module")
def exposed(tmp_path_factory) -> set[str]:
    """Every sample name the three daemons expose (with _total, _bucket, ... suffixes)."""
    tmp = tmp_path_factory.mktemp("m")
    submit = SubmitMetrics(new_registry())
    submit.watch_state(lambda: None, lambda: "enforce", None, lambda: 0.0)
    submit.observe("packed", "fits", 0.001)
    RefusalLog(logging.getLogger("test"), submit.registry).refused("forbidden", 65534, "test")
    watcher = new_registry()
    watcher.register(EventLogCollector(Store(tmp / "db")))
    watcher.register(MonitorCollector(FakeMonitor()))
    watcher.register(ConfigFileCollector(FakeSettingsFile()))
    agent = agent_registry(NodeAgent("node1", tmp, SimGpuBackend(tmp / "sim", "node1", gpus=["H100-80GB"])))
    names = set()
    for registry in (submit.registry, watcher, agent):
        for family in text_string_to_metric_families(generate_latest(registry).decode()):
            names |= {s.name for s in family.samples}
    return names


def used(expr: str) -> set[str]:
    return set(re.findall(r"\bgpupack_[a-z_]+", expr))


def test_dashboard_is_a_grafana_dashboard_over_real_series(exposed):
    doc = json.loads(DASHBOARD.read_text())
    assert isinstance(doc["schemaVersion"], int) and doc["schemaVersion"] >= 36
    assert doc["uid"] and doc["title"]
    panels = doc["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = set()
    for p in panels:
        assert p["type"] in PANEL_TYPES, p["type"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["targets"] and p["datasource"]["uid"] == "${datasource}"
        for t in p["targets"]:
            assert t["refId"] and t["expr"].count("(") == t["expr"].count(")")
            missing = used(t["expr"]) - exposed
            assert used(t["expr"]) and not missing, (p["title"], missing)
    queried = set().union(*(used(t["expr"]) for p in panels for t in p.get("targets", [])))
    families = {n.removesuffix("_total") for n in exposed if n.startswith("gpupack_") and not n.endswith("_created")}
    # every family the suite exposes is on the dashboard (histogram parts count for theirs)
    assert not {f for f in families if not any(q.startswith(f) for q in queried)}


def test_alert_rules_are_prometheus_rules_over_real_series(exposed):
    doc = yaml.safe_load(ALERTS.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert len({r["alert"] for r in rules}) == len(rules) >= 4
    for r in rules:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}
        assert r["labels"]["severity"] in ("critical", "warning", "info")
        assert r["annotations"]["summary"]
        assert r["expr"].count("(") == r["expr"].count(")")
        assert not used(r["expr"]) - exposed, r["alert"]
        if "for" in r:
            assert re.fullmatch(r"\d+[smh]", r["for"])
    alerts = {r["alert"] for r in rules}
    assert {"GpupackStaleClusterView", "GpupackSlowSubmitPath", "GpupackManyContentionRequeues"} <= alerts
