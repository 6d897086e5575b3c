"""The memory forecast a job page draws: the predictor's own `Forecaster`, fed the job's
samples as the monitor feeds it, kept per job so each page view adds only the new samples."""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from packer.samples import JobSample
from predictor.forecast import Forecast, Forecaster

MAX_TRACKED = 256  # jobs whose forecaster is kept (least recently viewed dropped first)


@dataclass
class _Tracked:
    started_at: float
    capacity: float
    horizon: float
    forecaster: Forecaster
    last_step: float = -1.0
    last: Forecast | None = None


class ForecastCache:
    def __init__(self, max_tracked: int = MAX_TRACKED):
        self.max_tracked = max_tracked
        self._jobs: OrderedDict[int, _Tracked] = OrderedDict()
        self._lock = threading.Lock()

    def forecast(self, job_id: int, started_at: float, capacity_bytes: float, horizon_s: float,
                 samples: Sequence[JobSample]) -> Forecast | None:
        """The forecast after the newest of `samples` (this run's, oldest first)."""
        if capacity_bytes <= 0 or not samples:
            return None
        with self._lock:
            t = self._jobs.get(job_id)
            if t is None or t.started_at != started_at or t.capacity != capacity_bytes or t.horizon != horizon_s:
                t = _Tracked(started_at, capacity_bytes, horizon_s, Forecaster(capacity_bytes, horizon_s))
                self._jobs[job_id] = t
            self._jobs.move_to_end(job_id)
            while len(self._jobs) > self.max_tracked:
                self._jobs.popitem(last=False)
            for s in samples:
                step = s.at - started_at
                if step <= t.last_step:
                    continue
                t.last = t.forecaster.update(step, max(s.mem_bytes, s.peak_mem_bytes))
                t.last_step = step
            return t.last
