"""The packer's settings, with the documented defaults (see etc/gpupack.toml)."""
from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

MODES = ("observe", "advise", "enforce")
GIB = 1024**3
_GRES_TYPE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


class ConfigError(ValueError):
    """A setting that cannot be used; the message names the key and the fix."""


@dataclass(frozen=True)
class PackerConfig:
    mode: str = "observe"
    # Unknown jobs (no history) stay exclusive and are profiled on their first run.
    pack_unknown: bool = False
    unknown_estimate_gib: float = 8.0  # used only with pack_unknown
    # Pack only when no whole GPU is idle for the job now (FIG. 3 of the patent seed).
    pack_only_when_no_idle_gpu: bool = True
    # Headroom added to the estimated peak: a fraction, but at least min_headroom_gib.
    headroom_fraction: float = 0.10
    min_headroom_gib: float = 0.5
    # Never give a packed job more than this fraction of the GPU.
    max_gpu_fraction: float = 0.95
    # Jobs busier than this (mean GPU utilisation, %) are not worth packing.
    max_util_pct: float = 90.0
    # How many recent runs the estimate looks at.
    history_window: int = 5
    # Shares per GPU (Slurm shards); by default one share = one MIG memory slice.
    shares_per_gpu: int = 8
    gpu_memory_gib: float = 80.0
    # The Slurm GRES type of the GPUs the shares above are sized for (gres.conf Type=, e.g.
    # "h100"). Set: a packed job gets shards of that type only (an untyped gpu:1 is typed, a
    # job typed for another model keeps its whole GPU). "": every GPU node has this model.
    gpu_type: str = ""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode={self.mode!r} is not one of {', '.join(MODES)}")
        if not 0 < self.max_gpu_fraction <= 1:
            raise ConfigError("max_gpu_fraction must be in (0, 1], e.g. 0.95")
        if self.shares_per_gpu < 1:
            raise ConfigError("shares_per_gpu must be at least 1")
        if self.gpu_memory_gib <= 0:
            raise ConfigError("gpu_memory_gib must be positive")
        if self.gpu_type and not _GRES_TYPE_RE.match(self.gpu_type):
            raise ConfigError(f"gpu_type={self.gpu_type!r} is not a GRES type name (gres.conf Type=, e.g. \"h100\")")
        if self.history_window < 1:
            raise ConfigError("history_window must be at least 1")

    @property
    def share_bytes(self) -> float:
        return self.gpu_memory_gib * GIB / self.shares_per_gpu

    def with_overrides(self, **overrides: object) -> "PackerConfig":
        return replace(self, **overrides)


def read_table(path: str | Path | None, section: str, settings: type,
               moved: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The `[section]` table of the TOML file at `path` (empty without the file or the table),
    its keys checked against the fields of the dataclass `settings`. A ConfigError for a file
    that cannot be read or an unknown key (naming the known ones; a key of `moved`: where it
    went instead)."""
    if path is None or not Path(path).exists():
        return {}
    try:
        table = dict(tomllib.loads(Path(path).read_text()).get(section, {}))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    known = {f.name for f in fields(settings)}
    unknown = sorted(set(table) - known)
    for key in unknown:
        if moved and key in moved:
            raise ConfigError(f"{path}: [{section}] {key} {moved[key]}")
    if unknown:
        raise ConfigError(f"{path}: unknown [{section}] keys {unknown}; known keys: {sorted(known)}")
    return table


def load_config(path: str | Path | None, section: str = "packer") -> PackerConfig:
    """Read the `[packer]` table of a TOML file; a missing file gives the defaults."""
    return PackerConfig(**read_table(path, section, PackerConfig))
