"""Metrics: the packer's decisions and the event counts, written next to the database and
served on `[monitor] metrics_port` (see `slurm_plugin.metrics`)."""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from packer import comment as comment_mod
from packer.store import Store
from slurm_plugin.helper.watches.round import RoundContext, WatchState
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)


class MetricsWatch:
    """Counts rounds and the submit path's decisions (once per job); writes the metrics file."""

    name = "metrics"

    def __init__(self, state: WatchState, store: Callable[[], Store]):
        self.state = state
        self._store = store  # the monitor's store of the moment
        self.decisions: dict[tuple[str, str], int] = {}
        self._seen_decisions: set[int] = set()
        self.rounds = 0

    def round(self, ctx: RoundContext) -> None:
        self._count_decisions(ctx.jobs.values())
        self.rounds += 1
        self._write_metrics()

    def _count_decisions(self, jobs: Iterable[Job]) -> None:
        for job in jobs:
            if job.job_id in self._seen_decisions:
                continue
            self._seen_decisions.add(job.job_id)
            record = comment_mod.parse(job.admin_comment)
            if record is None:
                continue
            key = (record.applied_verdict, record.reason or ("fits" if record.verdict == "packed" else "-"))
            self.decisions[key] = self.decisions.get(key, 0) + 1

    def metrics_text(self) -> str:
        from slurm_plugin.metrics import render

        store = self._store()
        counts = dict(store.db.execute("select kind, count(*) from events group by kind").fetchall())
        gauges = {
            "gpupack_monitor_tracked_jobs": (float(len(self.state.tracks)), "Running jobs the monitor has samples of."),
            "gpupack_monitor_rounds_total": (float(self.rounds), "Monitor rounds since the helper started."),
            "gpupack_jobs_at_head": (float(len(self.state.heading)), "Requeued jobs being kept at the head of the queue."),
        }
        return render(counts, self.decisions, gauges)

    def _write_metrics(self) -> None:
        from slurm_plugin.metrics import write_file

        store = self._store()
        if store.path == ":memory:":
            return
        try:
            write_file(Path(store.path).with_name("metrics.prom"), self.metrics_text())
        except (OSError, ValueError) as exc:
            log.debug("metrics file not written: %s", exc)
