"""The `[limits]` and `[retention]` tables of gpupack.toml: how much any caller may ask of the
helper, and how long what it keeps is kept (the store's tables and the watcher's per-job maps)."""
from __future__ import annotations

from dataclasses import dataclass

from packer.settings_schema import check_fields, setting


@dataclass(frozen=True)
class LimitSettings:
    requests_per_s_per_user: float = setting(500.0, ge=0)  # per user on the helper's socket; 0: no limit
    request_burst: int = setting(1000, ge=1)  # requests a user may send at once before the rate applies
    refusal_log_lines_per_min: int = setting(10, ge=1)  # log lines per refusal reason a minute (all counted)

    def __post_init__(self) -> None:
        check_fields(self, "limits")


@dataclass(frozen=True)
class RetentionSettings:
    events_days: float = setting(90.0, gt=0)  # event log rows older than this are deleted
    events_max_rows: int = setting(1_000_000, ge=1000)  # and never more rows than this (the oldest go)
    runs_per_fingerprint: int = setting(50, ge=1)  # finished runs kept per workload (history)
    runs_days: float = setting(365.0, gt=0)  # runs older than this are deleted
    action_ledger_days: float = setting(90.0, gt=0)  # judged action ledger rows older than this
    pair_days: float = setting(365.0, gt=0)  # pair speeds and avoided pairs not renewed for this long
    sizes_days: float = setting(365.0, gt=0)  # remembered restart sizes not renewed for this long
    # the controller's copy of the agents' slice journals: released rows, and rows of a node not
    # heard from, older than this
    slice_journal_days: float = setting(30.0, gt=0)
    forget_jobs_after_s: float = setting(3600.0, gt=0)  # the watcher's per-job memory of a job Slurm no longer lists
    prune_every_s: float = setting(600.0, gt=0)  # how often the store is pruned

    def __post_init__(self) -> None:
        check_fields(self, "retention")
