"""Head-of-queue lifts in the packer's SQLite store (`head_lifts`, schema 7).

A requeued job is lifted above every pending job by an administrator nice until it starts
(`slurm_plugin.helper.watches.head_lift`). The watcher keeps each lift here as well as in its
memory, so that a helper restarted between the lift and the start still puts the owner's nice
back: without it the job would keep the lowered nice, and its lead, for good.

`HeadLifts` is the watcher's map job id -> `Lift`: read from the table once, every change
written through. A row goes when its job starts, finishes or is forgotten (`JobMemory`).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, MutableMapping

from packer.preemption import Lift
from store.db import Store

log = logging.getLogger(__name__)


class HeadLifts(MutableMapping[int, Lift]):
    """The `head_lifts` table of the store that `store_of()` gives (asked at each write: the
    watcher's store may be swapped), as a mapping; read on first use."""

    def __init__(self, store_of: Callable[[], Store]):
        self._store_of = store_of
        self._lifts: dict[int, Lift] | None = None

    @property
    def _loaded(self) -> dict[int, Lift]:
        if self._lifts is None:
            rows = self._store_of().db.execute(
                "select job_id, own_nice, nice, restart_cnt from head_lifts order by job_id").fetchall()
            self._lifts = {job_id: Lift(own, nice, restarts) for job_id, own, nice, restarts in rows}
            if self._lifts:
                log.info("%d head-of-queue lift(s) kept from before: jobs %s", len(self._lifts),
                         ", ".join(map(str, self._lifts)))
        return self._lifts

    def __getitem__(self, job_id: int) -> Lift:
        return self._loaded[job_id]

    def __setitem__(self, job_id: int, lifted: Lift) -> None:
        lifts = self._loaded
        if lifts.get(job_id) == lifted:
            return
        self._store_of().db.execute(  # written first: what is in memory is always in the table
            "insert into head_lifts (job_id, restart_cnt, own_nice, nice, lifted_at) values (?, ?, ?, ?, ?) "
            "on conflict (job_id) do update set restart_cnt = excluded.restart_cnt, "
            "own_nice = excluded.own_nice, nice = excluded.nice",
            [job_id, lifted.restart_cnt, lifted.own_nice, lifted.nice, time.time()])
        lifts[job_id] = lifted

    def __delitem__(self, job_id: int) -> None:
        lifts = self._loaded
        if job_id not in lifts:
            raise KeyError(job_id)
        self._store_of().db.execute("delete from head_lifts where job_id = ?", [job_id])
        del lifts[job_id]

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._loaded))

    def __len__(self) -> int:
        return len(self._loaded)

    def __repr__(self) -> str:
        return f"HeadLifts({self._loaded!r})"
