"""The packer's settings, with the documented defaults (see etc/gpupack.toml); the file is read
by `slurm_plugin.config`."""
from __future__ import annotations

from dataclasses import dataclass, replace

from mig.errors import MigError
from mig.share_ladder import LadderError, ShareLadder, model_ladder
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
    # Pack only when no whole GPU is idle for the job now: an idle GPU costs no contention.
    pack_only_when_no_idle_gpu: bool = True
    # Headroom added to the estimated peak: a fraction, but at least min_headroom_gib.
    headroom_fraction: float = setting(0.10, ge=0, le=1)
    min_headroom_gib: float = setting(0.5, ge=0)
    # History that survives real edits (packer.workload_identity): with no run of the exact
    # script, the nearest looser level with history sizes the job, with more headroom:
    # "variant" (numbers and paths abstracted, scheduling-only #SBATCH lines aside), then
    # "command" (same user, job name and commands). The loosest level used ("exact": only
    # the exact script, as before). "variant" by default: the command level also matches
    # unrelated workloads that share a launcher (every job submitted on stdin is named "sbatch";
    # every `python -m pkg ...` of a user runs the same command), so it is a site's choice.
    loosest_history_level: str = setting("variant", choices=("exact", "variant", "command"))
    variant_headroom_fraction: float = setting(0.25, ge=0, le=1)
    command_headroom_fraction: float = setting(0.50, ge=0, le=1)
    # A looser level stops being used for a workload once it guessed wrong (a restart-oom or
    # a memory-forecast restart of a job it sized) this many times, and more often than right.
    level_wrong_guesses: int = setting(2, ge=1)
    # Never give a packed job more than this fraction of the GPU.
    max_gpu_fraction: float = setting(0.95, gt=0, le=1)
    # Jobs busier than this (mean GPU utilisation, %) are not worth packing.
    max_util_pct: float = setting(90.0, ge=0, le=100)
    # The GPU's total: a job joins a GPU only while every job's mean utilisation there, its
    # own included, sums to at most this (%; packer.util_cap). 0: no cap.
    max_gpu_util_pct: float = setting(0.0, ge=0, le=1000)
    # How many recent runs the estimate looks at.
    history_window: int = setting(5, ge=1)
    # Runs that ended longer ago than this (days) are not looked at (0: every run counts).
    history_max_age_days: float = setting(90.0, ge=0)
    # Shares per GPU (Slurm shards, gres.conf Count=) and the catalogued GPU model they are
    # sized for: with a model, a packed job is asked only share counts on the model's ladder
    # (mig.share_ladder: every combination Slurm can give is placeable as MIG instances).
    shares_per_gpu: int = setting(5, ge=1)
    gpu_memory_gib: float = setting(80.0, gt=0)
    gpu_model: str = setting("H100-80GB", pattern=r"|[A-Za-z0-9][A-Za-z0-9 _.\-]*",
                             means='a catalogued GPU model (`gpupack mig catalog`), or "" for none (MPS only)')
    # The Slurm GRES type of the GPUs the shares above are sized for (gres.conf Type=, e.g.
    # "h100"). Set: a packed job gets shards of that type only (an untyped gpu:1 is typed, a
    # job typed for another model keeps its whole GPU). "": every GPU node has this model.
    gpu_type: str = setting("", pattern=r"|[A-Za-z0-9_][A-Za-z0-9_.\-]*",
                            means='a GRES type name (gres.conf Type=, e.g. "h100"), or "" for any')

    def __post_init__(self) -> None:
        check_fields(self, "packer")
        if self.gpu_model:
            try:
                self.ladder  # noqa: B018 -- a model or share count with no safe ladder is refused
            except (LadderError, MigError) as exc:
                raise ConfigError(f"[packer] gpu_model = {self.gpu_model!r}, shares_per_gpu = "
                                  f"{self.shares_per_gpu}: {exc}") from None

    @property
    def ladder(self) -> ShareLadder | None:
        """The share counts a packed job may hold on ``gpu_model`` (None: no model, any count)."""
        return model_ladder(self.gpu_model, self.shares_per_gpu) if self.gpu_model else None

    @property
    def rungs(self) -> tuple[int, ...]:
        """The share counts a packed job may be asked for, ascending (the last: a whole GPU)."""
        ladder = self.ladder
        return ladder.rungs if ladder is not None else tuple(range(1, self.shares_per_gpu + 1))

    def headroom_for(self, level: str) -> float:
        """The headroom fraction of history found at ``level``: never less than a nearer level's."""
        fractions = {"exact": self.headroom_fraction,
                     "variant": max(self.headroom_fraction, self.variant_headroom_fraction)}
        fractions["command"] = max(fractions["variant"], self.command_headroom_fraction)
        if level not in fractions:
            raise ValueError(f"unknown history level {level!r}")
        return fractions[level]

    def history_since(self, now: float) -> float:
        """The oldest end time a run may have to count (0: every run)."""
        return now - self.history_max_age_days * 86400.0 if self.history_max_age_days > 0 else 0.0

    @property
    def share_bytes(self) -> float:
        """Memory per share: k shares (k on the ladder) hold at least k times this."""
        ladder = self.ladder
        if ladder is None:
            return self.gpu_memory_gib * GIB / self.shares_per_gpu
        return ladder.share_bytes

    def with_overrides(self, **overrides: object) -> "PackerConfig":
        return replace(self, **overrides)
