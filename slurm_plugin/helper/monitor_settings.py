"""The `[monitor]` table of gpupack.toml: how the controller helper watches running jobs."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

from packer.action_modes import check_action_modes
from packer.config import ConfigError


@dataclass(frozen=True)
class MonitorSettings:
    interval_s: float = 1.0  # one round: Slurm, samples, rules, actions
    # at most this share of the time spent in rounds: a long queue (seconds of squeue JSON)
    # stretches the interval instead of keeping the controller machine busy
    max_duty: float = 0.25
    # contention (patent seed, FIG. 4)
    contention_threshold: float = 0.10  # a senior losing more than this share of its throughput
    settle_s: float = 2.0  # samples this soon after the newcomer started are not compared
    min_samples_before: int = 2
    min_samples_after: int = 2
    # memory growth (thesis, Algorithm 1): forecast to this many seconds after the job started
    memory_horizon_s: float = 3600.0
    # skip Slurm's requeue delay (BeginTime = requeue + cred_expire) once the old run is
    # fully gone (not COMPLETING): the old launch credential can no longer start anything
    skip_requeue_delay: bool = True
    # the Slurm 22.05 gpu+shard collision guard (fixed upstream in 23.11.5): "auto" runs it
    # only on releases that double-book a GPU, or true / false
    quirk_guard: bool | str = "auto"
    # MPS percentages from measured utilisation
    mps_headroom: float = 0.10
    mps_floor_pct: int = 5
    # MIG layouts that follow the queue (thesis 4.3): in-order (FIFO), by-size, or off
    mig_layout: str = "in-order"
    # Prometheus endpoint on 127.0.0.1 (0: none; the file next to the database is always written)
    metrics_port: int = 0
    # `[monitor.actions]`: per run-time action (requeue-contention, restart-memory) off, shadow
    # or enforce; an action not named follows `mode` (enforce in enforce mode, else shadow)
    actions: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 < self.contention_threshold < 1:
            raise ConfigError("[monitor] contention_threshold must be a fraction in (0, 1), e.g. 0.10")
        if self.interval_s <= 0:
            raise ConfigError("[monitor] interval_s must be positive")
        if not 0 < self.max_duty <= 1:
            raise ConfigError("[monitor] max_duty must be a fraction in (0, 1], e.g. 0.25")
        if self.quirk_guard not in ("auto", True, False):
            raise ConfigError('[monitor] quirk_guard must be "auto", true or false')
        if self.mig_layout not in ("in-order", "by-size", "off"):
            raise ConfigError("[monitor] mig_layout must be in-order, by-size or off")
        if not 0 <= self.metrics_port < 65536:
            raise ConfigError("[monitor] metrics_port must be a TCP port, or 0 for none")
        if not isinstance(self.actions, dict):
            raise ConfigError('[monitor.actions] must be a table, e.g. restart-memory = "shadow"')
        check_action_modes(self.actions)


def load_monitor_settings(path: Path | None) -> MonitorSettings:
    if path is None or not Path(path).exists():
        return MonitorSettings()
    try:
        table = tomllib.loads(Path(path).read_text()).get("monitor", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    known = {f.name for f in fields(MonitorSettings)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown [monitor] keys {unknown}; known keys: {sorted(known)}")
    return MonitorSettings(**table)
