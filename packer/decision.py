"""Exclusive or packed: the submit-time decision, as a pure function.

Rules (after US 2025/0265126 A1): a one-GPU job with a history is packed as K shares of
a GPU when no whole GPU is idle for it now, its estimated peak memory plus headroom fits in
at most `max_gpu_fraction` of the GPU, and it is not busy enough to hog the GPU. Unknown jobs
stay exclusive and are profiled on their first run (unless `pack_unknown`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from packer.comment import render
from packer.config import GIB, PackerConfig
from packer.request import Candidate, NotCandidate


#: `Estimate.source` of a workload whose recent runs are all lower bounds (`packer.run_truth`)
LOWER_BOUND_SOURCE = "lower-bound"


@dataclass(frozen=True)
class Estimate:
    """What history says about a workload."""

    peak_mem_bytes: int  # the largest recent measured peak, raised to the largest recent lower bound
    mean_util_pct: float | None
    runs: int
    source: str = "history"
    lower_bound_bytes: int = 0  # a recent lower bound above every measured peak (0: none)
    # the workload identity level whose history this is (packer.workload_identity): the
    # looser the match, the more headroom (PackerConfig.headroom_for)
    level: str = "exact"

    @property
    def source_label(self) -> str:
        raised = "+bound" if self.lower_bound_bytes and self.source != LOWER_BOUND_SOURCE else ""
        return f"{self.source}({self.runs}){raised}"

    @property
    def measured(self) -> bool:
        """Whether a run measured the workload whole (not only lower bounds)."""
        return self.source != LOWER_BOUND_SOURCE


@dataclass(frozen=True)
class ClusterView:
    """What the packer needs to know about the cluster right now."""

    idle_gpus: int  # whole GPUs nobody holds, usable by this job


@dataclass(frozen=True)
class Decision:
    verdict: str  # packed | exclusive | untouched
    reason: str
    shards: int | None = None
    estimate: Estimate | None = None
    fingerprint: str | None = None
    avoid_nodes: tuple[str, ...] = ()  # nodes kept out of reach (pair avoidance)

    def comment(self, advised: bool = False) -> str:
        est = self.estimate
        extra: dict[str, str | None] = {}
        if self.verdict != "packed":
            extra["reason"] = self.reason
        if est is not None:
            extra["est"] = f"{est.peak_mem_bytes / GIB:.1f}GiB"
            if est.mean_util_pct is not None:
                extra["util"] = f"{est.mean_util_pct:.0f}%"
            extra["src"] = est.source_label
            if est.runs and est.measured:
                extra["lvl"] = est.level
        extra["fp"] = self.fingerprint
        if self.avoid_nodes:
            extra["avoid"] = ",".join(self.avoid_nodes)
        return render(self.verdict, shards=self.shards, advised=advised, **extra)


def packed_type(request: Candidate, config: PackerConfig) -> str | None:
    """The GPU type a packed job's shards are asked on: the job's own, else the one the
    shares are sized for (an untyped job becomes shares of that model only), else any."""
    return request.gpu_type or config.gpu_type or None


def on_ladder(shares: int, config: PackerConfig) -> int:
    """``shares`` rounded up to the next share count on the model's ladder (``config.rungs``);
    above the GPU's shares it is returned as is (more than any packed job may hold)."""
    return next((k for k in config.rungs if k >= shares), shares)


def shards_needed(peak_mem_bytes: int, config: PackerConfig, level: str = "exact") -> int:
    """Shares of the GPU that hold the peak plus the headroom of the history's ``level``, on
    the ladder."""
    headroom = max(peak_mem_bytes * config.headroom_for(level), config.min_headroom_gib * GIB)
    return on_ladder(max(1, math.ceil((peak_mem_bytes + headroom) / config.share_bytes)), config)


def max_shards(config: PackerConfig) -> int:
    """The most shares a packed job may hold: the largest share count on the ladder that is
    not above max_gpu_fraction of the GPU (0: none is)."""
    cap = math.floor(config.shares_per_gpu * config.max_gpu_fraction + 1e-9)
    return max((k for k in config.rungs if k <= cap), default=0)


def decide(
    request: Candidate | NotCandidate,
    estimate: Estimate | None,
    cluster: ClusterView,
    config: PackerConfig,
    fingerprint: str | None = None,
    remembered_shards: int | None = None,
) -> Decision:
    """The verdict for one submission. Pure; never raises for any input it is given.

    `remembered_shards` is a size learnt the hard way (the job was restarted for memory):
    the job never gets fewer shares than that again. An estimate of lower bounds only (no
    run measured the workload whole) is no history: the job stays exclusive and is measured,
    or with `pack_unknown` gets the default size, or more when a lower bound says so.
    """
    if isinstance(request, NotCandidate):
        return Decision("untouched", request.reason)
    if request.gpu_type and config.gpu_type and request.gpu_type.lower() != config.gpu_type.lower():
        # the shares are sized for another model: K shards of this one would be guesswork
        return Decision("exclusive", "other-gpu-type", fingerprint=fingerprint)
    if estimate is None or not estimate.measured:
        if not config.pack_unknown:
            return Decision("exclusive", "no-history", estimate=estimate, fingerprint=fingerprint)
        bound = estimate.peak_mem_bytes if estimate is not None else 0
        estimate = Estimate(max(int(config.unknown_estimate_gib * GIB), bound), None, 0, source="default",
                            lower_bound_bytes=bound)
    if estimate.mean_util_pct is not None and estimate.mean_util_pct > config.max_util_pct:
        return Decision("exclusive", "high-util", estimate=estimate, fingerprint=fingerprint)
    k = on_ladder(max(shards_needed(estimate.peak_mem_bytes, config, estimate.level), remembered_shards or 0),
                  config)
    if k > max_shards(config):
        return Decision("exclusive", "too-large", estimate=estimate, fingerprint=fingerprint)
    if config.pack_only_when_no_idle_gpu and cluster.idle_gpus > 0:
        return Decision("exclusive", "idle-gpu", estimate=estimate, fingerprint=fingerprint)
    reason = "remembered-size" if remembered_shards and k == remembered_shards else "fits"
    return Decision("packed", reason, shards=k, estimate=estimate, fingerprint=fingerprint)
