"""Retention: what the helper keeps is kept only as long as `[retention]` says.

- the store (`prune_store`): events by age and by count, runs by age and per workload (the
  newest `runs_per_fingerprint`), memory curves with their runs, judged action-ledger rows by
  age (and open ones twice as long), pair speeds, avoided pairs and remembered sizes not renewed
  for their time, the slice journals' copy (released rows, and those of nodes not heard from),
  the jobs' identities (`store.identities`) by the events' age and count;
- the watcher's per-job memory (`JobMemory`): every map and set keyed by a job id forgets a
  job Slurm has not listed for `forget_jobs_after_s` (the head-of-queue lifts' rows in the
  store, `head_lifts`, with them: they also go when their job starts or ends).

`RetentionWatch` runs both from the watcher's rounds (the store every `prune_every_s`).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any

from store.curves import RunCurves
from store.db import Store
from store.identities import JobIdentities
from store.ledger import ActionLedger
from store.retention import StoreRetention
from store.slices import SliceMirror
from slurm_plugin.config.bounds import RetentionSettings
from slurm_plugin.helper.watches.round import RoundContext

log = logging.getLogger(__name__)

DAY_S = 86400.0


def prune_store(store: Store, r: RetentionSettings, now: float) -> dict[str, int]:
    """Delete what `r` no longer keeps; rows deleted per table."""
    runs_cut, pair_cut = now - r.runs_days * DAY_S, now - r.pair_days * DAY_S
    deleted = StoreRetention(store).prune(events_before=now - r.events_days * DAY_S, events_max_rows=r.events_max_rows,
                                          runs_before=runs_cut, runs_per_fingerprint=r.runs_per_fingerprint,
                                          pairs_before=pair_cut, sizes_before=now - r.sizes_days * DAY_S)
    deleted["run_curves"] = RunCurves(store).prune(runs_cut)
    deleted["action_ledger"] = ActionLedger(store, create=False).prune(
        now - r.action_ledger_days * DAY_S, now - 2 * r.action_ledger_days * DAY_S)
    deleted["slice_journal"] = SliceMirror(store).prune(now - r.slice_journal_days * DAY_S)
    # a job's identity is read at the end of each of its runs: kept as long as its events
    deleted["job_identities"] = JobIdentities(store).prune(now - r.events_days * DAY_S, r.events_max_rows)
    return {t: n for t, n in deleted.items() if n}


def _job_of(key: Any) -> Any:
    return key[0] if isinstance(key, tuple) else key


class JobMemory:
    """Forget jobs Slurm no longer lists, in every per-job map and set `containers()` names
    (dicts and sets keyed by a job id, or by a tuple whose first item is one)."""

    def __init__(self, containers: Callable[[], Iterable[Any]], forget_after_s: float):
        self._containers = containers
        self.forget_after_s = forget_after_s
        self.last_listed: dict[int, float] = {}

    def round(self, listed: Iterable[int], now: float) -> int:
        """Note the jobs listed now; forget those unlisted for too long. Jobs forgotten."""
        last = self.last_listed
        for job_id in listed:
            last[job_id] = now
        gone = {j for j, at in last.items() if now - at > self.forget_after_s}
        if not gone:
            return 0
        for job_id in gone:
            del last[job_id]
        for container in self._containers():
            for key in [k for k in container if _job_of(k) in gone]:
                if isinstance(container, MutableMapping):
                    del container[key]
                else:
                    container.discard(key)
        return len(gone)


class RetentionWatch:
    name = "retention"

    def __init__(self, settings: RetentionSettings, memory: JobMemory):
        self.settings = settings
        self.memory = memory
        self._pruned_at: float | None = None
        self.deleted: dict[str, int] = {}  # rows deleted since the watcher started, per table

    def round(self, ctx: RoundContext) -> None:
        self.memory.round(ctx.jobs, ctx.now)
        if self._pruned_at is not None and ctx.now - self._pruned_at < self.settings.prune_every_s:
            return
        self._pruned_at = ctx.now
        deleted = prune_store(ctx.actions.store, self.settings, ctx.now)
        for table, n in deleted.items():
            self.deleted[table] = self.deleted.get(table, 0) + n
        if deleted:
            log.info("retention: deleted %s", ", ".join(f"{n} {t}" for t, n in sorted(deleted.items())))
