"""Memory in the replay: what a job holds as it grows, when the predictor warns, and the
larger size a job restarts with after an out-of-memory or a warning.

A growing job's memory rises linearly from ``mem0`` to ``mem1`` with its progress. With
``SimConfig(predictor=True)`` the suite's ``predictor.forecast.Forecaster`` reads the
job's samples as the node agent would and says when it would warn and with which size;
the warning becomes a job event (:mod:`~slurm_plugin.simulator.progress`). A restart
remembers the larger size (``Job.remembered``), as the helper's restart does.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from packer.config import PackerConfig
from packer.decision import max_shards
from slurm_plugin.simulator.config import SimConfig
from slurm_plugin.simulator.state import Job

if TYPE_CHECKING:
    from slurm_plugin.simulator.mig_state import MigState


def mem_now(j: Job, now: float) -> int:
    """Memory a job holds now (it grows linearly with its progress)."""
    if j.mem1 == j.mem0:
        return j.mem0
    done = j.done + (now - j.last_t) * j.rate
    return int(j.mem0 + (j.mem1 - j.mem0) * min(1.0, max(0.0, done) / j.duration))


class MemoryRestarts:
    """The predictor's warnings and the sizes jobs restart with."""

    def __init__(self, cfg: SimConfig, pk: PackerConfig, gpu_mem: int, mig: "MigState | None"):
        self.cfg = cfg
        self.pk = pk
        self.gpu_mem = gpu_mem
        self.mig = mig
        self._warn_cache: dict[tuple, tuple[float | None, int | None]] = {}
        self._forecaster_cls = None

    def sizes(self) -> tuple[int, ...]:
        """The sizes a job may get, bytes: MIG instances, or share counts and the whole GPU."""
        if self.mig:
            return self.mig.sizes()
        k = max_shards(self.pk)
        share = self.pk.share_bytes
        return tuple(int(i * share) for i in range(1, k + 1)) + (self.gpu_mem,)

    def plan_warning(self, job: Job) -> None:
        """When would the forecaster warn (in alone-seconds of work), and with which size."""
        if not self.cfg.predictor:
            return
        key = (job.mem0, job.mem1, job.cap)
        hit = self._warn_cache.get(key)
        if hit is None:
            if self._forecaster_cls is None:
                from predictor.forecast import Forecaster
                self._forecaster_cls = Forecaster
            n = self.cfg.predictor_samples
            f = self._forecaster_cls(job.cap, n, partition_sizes=self.sizes())
            hit = (None, None)
            for i in range(1, n + 1):
                mem = job.mem0 + (job.mem1 - job.mem0) * i / n
                if mem > job.cap:
                    break
                fc = f.update(i, mem)
                if fc.warn:
                    hit = (i / n, fc.next_partition)
                    break
            self._warn_cache[key] = hit
        frac, nxt = hit
        if frac is not None:
            job.warn_work = frac * job.duration
            job.warn_next = nxt

    def remember_bigger(self, job: Job, predicted: bool) -> None:
        """Count the restart and raise the size the job asks for next time."""
        if predicted:
            job.pred_restarts += 1
            job.remembered = max(job.remembered, job.warn_next or self.gpu_mem)
        else:
            job.oom_restarts += 1
            job.remembered = max(job.remembered, self._next_size(job.cap))

    def _next_size(self, cap: int) -> int:
        for s in self.sizes():
            if s > cap:
                return s
        return self.gpu_mem
