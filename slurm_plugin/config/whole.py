"""gpupack.toml as a whole: every table, every key, type- and range-checked together.

`load_settings` is what a daemon reads at start and on each edit; `check_file` is `gpupack
config check FILE`. Every problem is reported, not only the first: unknown tables, unknown
keys, values of the wrong type or out of range, each naming the table, the key, the value and
what is allowed."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packer.config import PackerConfig
from packer.settings_schema import ConfigError
from slurm_plugin.agent.directory import AgentSettings, parse_agents
from slurm_plugin.config.bounds import LimitSettings, RetentionSettings
from slurm_plugin.config.toml_file import read_document, table_of
from slurm_plugin.helper.monitor_settings import MOVED_MONITOR_KEYS, MonitorSettings
from slurm_plugin.helper.settings import Paths
from slurm_plugin.metrics.settings import MetricsSettings
from slurm_plugin.web.settings import WebSettings

#: every table of gpupack.toml and the settings class that is its schema
SECTIONS: dict[str, type] = {
    "packer": PackerConfig,
    "paths": Paths,
    "monitor": MonitorSettings,
    "metrics": MetricsSettings,
    "web": WebSettings,
    "limits": LimitSettings,
    "retention": RetentionSettings,
    "agent": AgentSettings,
}
#: tables that are maps (any key, read by `parse_agents`) rather than settings: what a key is
MAPS: dict[str, str] = {"agents": 'node = "host:port": where that node\'s agent listens '
                                  '(wins over its NodeAddr and [agent] port)'}
TABLES = [*SECTIONS, *MAPS]
MOVED: dict[str, dict[str, str]] = {"monitor": MOVED_MONITOR_KEYS}


@dataclass(frozen=True)
class GpupackSettings:
    """Every table of gpupack.toml, checked."""

    packer: PackerConfig = field(default_factory=PackerConfig)
    paths: Paths = field(default_factory=Paths)
    monitor: MonitorSettings = field(default_factory=MonitorSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    web: WebSettings = field(default_factory=WebSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)  # with the [agents] map


def problems_of(document: dict[str, Any], path: str | Path | None) -> tuple[GpupackSettings | None, list[str]]:
    """(the settings, or None, and every problem found) for a parsed document."""
    problems = [f"{path}: unknown table [{name}]; known tables: {', '.join(f'[{s}]' for s in TABLES)}"
                for name in sorted(set(document) - set(TABLES))]
    built: dict[str, Any] = {}
    for section, cls in SECTIONS.items():
        try:
            table = table_of(document, path, section, cls, MOVED.get(section))
            if section == "web" and isinstance(table.get("allow"), str):
                table["allow"] = [table["allow"]]
            built[section] = cls(**table)
        except ConfigError as exc:
            problems.append(str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}")
    try:
        agents = parse_agents(document.get("agents", {}), path)
        if "agent" in built:
            built["agent"] = replace(built["agent"], agents=agents)
    except ConfigError as exc:
        problems.append(str(exc))
    if not problems and built["retention"].runs_per_fingerprint < built["packer"].history_window:
        problems.append(f"{path}: [retention] runs_per_fingerprint = {built['retention'].runs_per_fingerprint} is not "
                        f"allowed: at least [packer] history_window ({built['packer'].history_window})")
    return (GpupackSettings(**built) if not problems else None), problems


def check_file(path: str | Path) -> list[str]:
    """Every problem of the file at `path` (an empty list: it loads)."""
    if not Path(path).exists():
        return [f"{path}: no such file"]
    try:
        document = read_document(path)
    except ConfigError as exc:
        return [str(exc)]
    return problems_of(document, path)[1]


def load_settings(path: str | Path | None) -> GpupackSettings:
    """The whole file, checked (a missing file: the defaults); a `ConfigError` listing every
    problem otherwise."""
    settings, problems = problems_of(read_document(path), path)
    if problems:
        raise ConfigError("\n".join(problems))
    assert settings is not None
    return settings


def load_agent_settings(path: Path | None) -> AgentSettings:
    """``[agent]`` with ``[agents]``, as the one loader reads the whole file."""
    return load_settings(path).agent
