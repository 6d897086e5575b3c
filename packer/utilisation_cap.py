"""The cap on a GPU's total utilisation (US 2025/0265126 A1, [0038]: the aggregate of the
newcomer's utilisation and the running jobs' stays at or below 95 % of the GPU). Pure.

Beside the memory cap (``max_gpu_fraction`` of the GPU's memory), a pack is refused on a GPU
where the jobs already there plus the newcomer would pass ``[packer] max_gpu_util_pct`` (0:
no cap, the default; 95: the patent's) of summed mean utilisation (each job's from its history, as measured alone). A job whose
utilisation is not known adds nothing and is named (``unknown``): the memory cap still holds
for it, and the contention watches judge the pack by what they measure.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

REASON = "util-cap"
#: a cap of 0 means no cap (the setting's "off")
NO_CAP = 0.0


@dataclass(frozen=True)
class UtilCheck:
    """The GPU's summed utilisation with the newcomer, and whether it stays under the cap."""

    total_pct: float
    cap_pct: float
    unknown: int  # jobs (the newcomer included) whose utilisation is not known

    @property
    def fits(self) -> bool:
        return self.cap_pct == NO_CAP or self.total_pct <= self.cap_pct + 1e-9

    def text(self) -> str:
        return f"{self.total_pct:.0f}%/{self.cap_pct:.0f}%"


def check_util(corunner_utils: Sequence[float | None], newcomer_util: float | None, cap_pct: float) -> UtilCheck:
    """The newcomer's utilisation plus its co-runners', against ``cap_pct`` (0: no cap, it
    always fits)."""
    if not cap_pct >= 0:
        raise ValueError(f"the utilisation cap must be 0 (off) or a positive percentage, got {cap_pct}")
    utils = [*corunner_utils, newcomer_util]
    known = [u for u in utils if u is not None]
    return UtilCheck(sum(known), cap_pct, len(utils) - len(known))


def first_under_cap(gpus: Sequence[tuple[str, Sequence[float | None]]], newcomer_util: float | None,
                    cap_pct: float) -> tuple[str | None, UtilCheck | None]:
    """The first GPU of ``gpus`` ((id, its jobs' utilisations) each) the newcomer may join
    under the cap, and its check; (None, the least loaded GPU's check) when none may
    ((None, None) without GPUs)."""
    best: UtilCheck | None = None
    for gpu_id, utils in gpus:
        check = check_util(utils, newcomer_util, cap_pct)
        if check.fits:
            return gpu_id, check
        if best is None or check.total_pct < best.total_pct:
            best = check
    return None, best
