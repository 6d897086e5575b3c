"""The utilisation cap on a GPU's total (after US 2025/0265126 A1's 95 %): a job joins a GPU
only while the mean utilisations of every job there, its own included, sum to at most the cap.

It stands beside the memory cap on the GPU's total (``max_gpu_fraction``) and the per-job
limit (``max_util_pct``: a busier job stays exclusive). Pure; shared by the replay's colocate
(``packer.corunner`` through ``SuiteRules.corunners``) and the live helper's rules.
"""
from __future__ import annotations

from collections.abc import Iterable

#: a cap of 0 means no cap (the setting's "off")
NO_CAP = 0.0


def within_util_cap(newcomer_util_pct: float | None, resident_utils_pct: Iterable[float | None],
                    cap_pct: float) -> bool:
    """True when a newcomer at ``newcomer_util_pct`` (mean GPU utilisation, %) may join a GPU
    whose jobs run at ``resident_utils_pct``: their sum with it is at most ``cap_pct``.

    ``cap_pct`` 0 (:data:`NO_CAP`): always True. A utilisation not known (None: a job with no
    history) adds nothing: the cap judges what is measured, and the memory cap and the
    contention watch still hold for the rest. A negative or non-finite utilisation is refused
    (ValueError), as is a negative cap."""
    if cap_pct < 0 or cap_pct != cap_pct:
        raise ValueError(f"utilisation cap {cap_pct!r} must be 0 (off) or a percentage above 0")
    if cap_pct == NO_CAP:
        return True
    total = 0.0
    for u in (newcomer_util_pct, *resident_utils_pct):
        if u is None:
            continue
        if not 0.0 <= u < float("inf"):
            raise ValueError(f"utilisation {u!r} must be a finite percentage >= 0")
        total += u
    return total <= cap_pct + 1e-9
