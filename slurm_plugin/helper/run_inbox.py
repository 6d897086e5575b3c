"""The runs the monitor saw end, on their way to the history's one writer.

A monitor round writes no history: the history watch puts what its samples saw of each run
that ended here (`RunInbox.put`), and the watcher's finals thread
(`helper.finals.FinalsCollector`), the one writer, writes them every second through
`history_recorder.HistoryRecorder.record`, with the agents' summaries of the same runs.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass

from packer.run_truth import RunEnd
from slurm_plugin.history_recorder import HistoryRecorder, RunFigures
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SeenRun:
    """What the monitor saw of a run it tracked, waiting for the writer."""

    figures: RunFigures
    job: Job | None
    fp: tuple[str, str, str]
    end: RunEnd


class RunInbox:
    """The monitor's finished runs, handed to the one writer (the watcher's finals thread,
    `helper.finals.FinalsCollector`): a round writes no history. Holds at most `max_runs`; past
    it the oldest is dropped and counted (the agent keeps its own summary of that run until it
    is written, so the sweep still records it)."""

    def __init__(self, max_runs: int = 10_000):
        self._runs: deque[SeenRun] = deque()
        self._lock = threading.Lock()
        self.max_runs = max_runs
        self.dropped = 0

    def put(self, run: SeenRun) -> None:
        with self._lock:
            self._runs.append(run)
            while len(self._runs) > self.max_runs:
                dropped = self._runs.popleft()
                self.dropped += 1
                log.warning("job %d: the monitor's figures of its run dropped (%d waiting): its agent's summary "
                            "records it", dropped.figures.job_id, self.max_runs)

    def take(self) -> list[SeenRun]:
        with self._lock:
            runs, self._runs = list(self._runs), deque()
        return runs

    def write(self, recorder: HistoryRecorder) -> dict[int, str]:
        """Write every run waiting (`HistoryRecorder.record`); job -> outcome. A run Slurm did not
        answer for is dropped (logged): its agent's summary records it."""
        done: dict[int, str] = {}
        for seen in self.take():
            try:
                done[seen.figures.job_id] = recorder.record(seen.figures, seen.job, seen.fp, seen.end, "monitor")
            except (SlurmError, ValueError) as exc:
                log.warning("job %d: the monitor's figures of its run not written: %s", seen.figures.job_id, exc)
        return done
