"""etc/gpupack.toml, the documented settings file, read by the helper's own loaders: every key
it names is accepted, every value it gives is the loader's default ([paths] aside: a site's
places; and the [packer] keys chosen by measurement, marked "shipped:" in the file), and every
`[packer]` / `[monitor]` key the loaders accept is documented in it."""
from __future__ import annotations

import re
import tomllib
from dataclasses import fields
from pathlib import Path

from packer.action_modes import ACTION_KINDS
from packer.config import PackerConfig
from slurm_plugin.config.toml_file import load_config
from slurm_plugin.config.whole import GpupackSettings, check_file, load_agent_settings, load_settings
from slurm_plugin.helper.monitor_settings import MonitorSettings, load_monitor_settings
from slurm_plugin.agent.directory import AgentSettings
from slurm_plugin.helper.settings import Paths, load_paths
from slurm_plugin.metrics.settings import MetricsSettings, load_metrics_settings
from slurm_plugin.web.settings import WebSettings, load_web_settings

TOML = Path(__file__).resolve().parents[2] / "etc" / "gpupack.toml"
# the [packer] values the file ships that differ from the loaders' (more cautious) defaults:
# chosen by measurement on held-out data (docs/simulator.md, "Shipped settings"; issue 34)
SHIPPED_CHOICES = {"pack_unknown": True, "max_util_pct": 100.0}


def test_every_table_loads_with_the_real_loaders_and_gives_the_defaults():
    assert load_config(TOML) == PackerConfig(**SHIPPED_CHOICES)
    assert load_monitor_settings(TOML) == MonitorSettings()
    assert load_settings(TOML).monitor.actions == {}  # every action commented out: each follows `mode`
    assert check_file(TOML) == []
    assert load_settings(TOML).web == GpupackSettings().web
    assert load_metrics_settings(TOML) == MetricsSettings()
    assert load_web_settings(TOML) == WebSettings()
    assert load_agent_settings(TOML) == AgentSettings()


def test_paths_load_and_the_ones_with_a_default_give_it():
    paths = load_paths(TOML)
    defaults = Paths()
    assert (paths.database, paths.socket, paths.kill_switch, paths.slurm_user) == (
        defaults.database, defaults.socket, defaults.kill_switch, defaults.slurm_user)
    assert paths.slurm_conf is None  # commented out: $SLURM_CONF, else Slurm's default
    assert paths.agent_dir == Path("/var/lib/gpupack")  # the agents' default --state-dir


def _documented(section: str) -> set[str]:
    """Keys set in `[section]` of the file, and keys shown there commented out (`# key = ...`)."""
    text = TOML.read_text()
    body = re.split(r"^\[", text, flags=re.M)
    table = next(part for part in body if part.startswith(f"{section}]"))
    return set(re.findall(r"^#?\s*([a-z][a-z0-9_-]*)\s*=", table, flags=re.M))


def test_every_packer_and_monitor_key_is_documented_in_the_file():
    parsed = tomllib.loads(TOML.read_text())
    assert {f.name for f in fields(PackerConfig)} == set(parsed["packer"])
    monitor_keys = {f.name for f in fields(MonitorSettings)} - {"actions"}  # actions: [monitor.actions]
    assert monitor_keys == set(parsed["monitor"]) - {"actions"}
    assert set(ACTION_KINDS) <= _documented("monitor.actions")
    assert {f.name for f in fields(MetricsSettings)} <= _documented("metrics")
    assert {f.name for f in fields(WebSettings)} <= _documented("web")
    assert {f.name for f in fields(AgentSettings)} - {"agents"} <= _documented("agent")
    assert {f.name for f in fields(Paths)} <= _documented("paths")


def test_each_shipped_choice_is_marked_and_differs_from_the_default():
    lines = {line.split("=")[0].strip(): line for line in TOML.read_text().splitlines() if "=" in line}
    for key, value in SHIPPED_CHOICES.items():
        assert getattr(PackerConfig(), key) != value, f"{key}: the same as the default, no choice to mark"
        assert "shipped:" in lines[key] or "shipped:" in TOML.read_text().split(lines[key])[1].splitlines()[1], key
