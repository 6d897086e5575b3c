"""GPUs shared without MIG (shard-fixed, lucid-like, colocate): the index of GPUs by what
runs on them, and the speeds jobs get beside each other.

:class:`ShareIndex` files each GPU running one one-GPU job under (workload, memory held),
and (colocate with more than two per GPU) each GPU running 2 to ``max_jobs_per_gpu - 1``
one-GPU jobs under the sorted tuple of theirs: the packing policies look for room by kind
of GPU, not GPU by GPU. ``opened`` is bumped when room appears for a job, ``version`` when a
kind appears or goes, ``appeared`` logs the kinds as they appear (the policies' memos and
the fast path read them), ``gone`` the kinds as they go.

:func:`shared_rates`: each job's speed beside the others, the product of its measured pair
speeds; with more than two jobs no GPU gives more than its compute (sum of utilisation x
speed at most 100 %).
"""
from __future__ import annotations

from simulator.state import Gpu, Job
from simulator.workload import PairTable


class ShareIndex:
    def __init__(self, share_bytes: float, max_jobs_per_gpu: int, multi_on: bool):
        self.share = int(share_bytes)
        self.max_jobs = max_jobs_per_gpu
        self.multi_on = multi_on  # colocate with more than two per GPU
        self.single: dict[tuple, dict[int, None]] = {}  # (profile, held) -> GPUs with one job
        # colocate, more than two per GPU: sorted ((profile, held), ...) -> GPUs with 2..max-1
        self.multi: dict[tuple, dict[int, None]] = {}
        self.opened = 0  # bumped when room appears for a job (a GPU with one job, free shares)
        self.version = 0  # bumped when a (workload, size) group of one-job GPUs appears/goes
        self.appeared: list[tuple] = []  # every kind (key of single or multi) as it appears
        self.gone: list[tuple] = []  # every kind as it goes (its last GPU taken out)
        self.changes = 0  # bumped whenever a GPU is filed or taken out (any group changes)

    def held(self, job: Job) -> int:
        return job.shards * self.share if job.shards else job.mem0

    def _multi_key(self, g: Gpu) -> tuple | None:
        if 2 <= len(g.jobs) < self.max_jobs and all(j.gpus == 1 for j in g.jobs):
            return tuple(sorted((j.profile, self.held(j)) for j in g.jobs))
        return None

    def remove(self, g: Gpu) -> None:
        """Take ``g`` out of the index (before its jobs change)."""
        self.changes += 1
        if self.multi_on:
            key = self._multi_key(g)
            d = self.multi.get(key) if key else None
            if d is not None:
                d.pop(g.id, None)
                if not d:
                    del self.multi[key]
                    self.version += 1
                    self.gone.append(key)
        if len(g.jobs) == 1 and g.jobs[0].gpus == 1:
            j = g.jobs[0]
            key = (j.profile, self.held(j))
            d = self.single.get(key)
            if d is not None:
                d.pop(g.id, None)
                if not d:
                    del self.single[key]
                    self.version += 1
                    self.gone.append(key)

    def add(self, g: Gpu) -> None:
        """File ``g`` under what runs on it now."""
        self.changes += 1
        if self.multi_on:
            key = self._multi_key(g)
            if key:
                d = self.multi.get(key)
                if d is None:
                    d = self.multi[key] = {}
                    self.version += 1
                    self.appeared.append(key)
                d[g.id] = None
                self.opened += 1
        if len(g.jobs) == 1 and g.jobs[0].gpus == 1:
            j = g.jobs[0]
            key = (j.profile, self.held(j))
            d = self.single.get(key)
            if d is None:
                d = self.single[key] = {}
                self.version += 1
                self.appeared.append(key)
            d[g.id] = None
            self.opened += 1


def shared_rates(jobs: list[Job], pairs: PairTable) -> list[tuple[Job, float, bool]]:
    """(job, speed, whether all its pairs were measured) for the jobs sharing one GPU; notes
    in each job whom it shared with and whether a pair was unmeasured."""
    rates = []
    for j in jobs:
        rate = 1.0
        measured = True
        for o in jobs:
            if o is not j:
                rate *= pairs.speed(j.profile, o.profile)
                j.shared_with.add(o.id)
                if not pairs.is_measured(j.profile, o.profile):
                    j.unmeasured = True
                    measured = False
        rates.append((j, rate, measured))
    if len(rates) > 2:  # no GPU gives more than its compute: sum of util x speed <= 100 %
        used = sum(j.util * r for j, r, _ in rates) / 100.0
        if used > 1.0:
            rates = [(j, r / used, m) for j, r, m in rates]
    return rates
