"""The packer's settings, with the documented defaults (see etc/gpupack.toml); the file is read
by `slurm_plugin.config`."""
from __future__ import annotations

from dataclasses import dataclass, replace

from packer.settings_schema import ConfigError, check_fields, setting

MODES = ("observe", "advise", "enforce")
GIB = 1024**3

__all__ = ["ConfigError", "GIB", "MODES", "PackerConfig"]


@dataclass(frozen=True)
class PackerConfig:
    mode: str = setting("observe", choices=MODES)
    # Unknown jobs (no history) stay exclusive and are profiled on their first run.
    pack_unknown: bool = False
    unknown_estimate_gib: float = setting(8.0, gt=0)  # used only with pack_unknown
    # Pack only when no whole GPU is idle for the job now (FIG. 3 of the patent seed).
    pack_only_when_no_idle_gpu: bool = True
    # Headroom added to the estimated peak: a fraction, but at least min_headroom_gib.
    headroom_fraction: float = setting(0.10, ge=0, le=1)
    min_headroom_gib: float = setting(0.5, ge=0)
    # Never give a packed job more than this fraction of the GPU.
    max_gpu_fraction: float = setting(0.95, gt=0, le=1)
    # Jobs busier than this (mean GPU utilisation, %) are not worth packing.
    max_util_pct: float = setting(90.0, ge=0, le=100)
    # How many recent runs the estimate looks at.
    history_window: int = setting(5, ge=1)
    # Runs that ended longer ago than this (days) are not looked at (0: every run counts).
    history_max_age_days: float = setting(90.0, ge=0)
    # Shares per GPU (Slurm shards); by default one share = one MIG memory slice.
    shares_per_gpu: int = setting(8, ge=1)
    gpu_memory_gib: float = setting(80.0, gt=0)
    # The Slurm GRES type of the GPUs the shares above are sized for (gres.conf Type=, e.g.
    # "h100"). Set: a packed job gets shards of that type only (an untyped gpu:1 is typed, a
    # job typed for another model keeps its whole GPU). "": every GPU node has this model.
    gpu_type: str = setting("", pattern=r"|[A-Za-z0-9_][A-Za-z0-9_.\-]*",
                            means='a GRES type name (gres.conf Type=, e.g. "h100"), or "" for any')

    def __post_init__(self) -> None:
        check_fields(self, "packer")

    def history_since(self, now: float) -> float:
        """The oldest end time a run may have to count (0: every run)."""
        return now - self.history_max_age_days * 86400.0 if self.history_max_age_days > 0 else 0.0

    @property
    def share_bytes(self) -> float:
        return self.gpu_memory_gib * GIB / self.shares_per_gpu

    def with_overrides(self, **overrides: object) -> "PackerConfig":
        return replace(self, **overrides)
