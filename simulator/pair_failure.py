"""A pair that cannot run together (a truth speed of 0): the job that joined last fails.

On a real cluster two jobs that cannot share a GPU (one makes no progress beside the other,
or crashes) are found out by the job that arrived last: it fails, or the contention watch
requeues it (the job that arrived last pays, never a senior one), and the pair is
kept apart from then on. The replay does the same:

- while a GPU shared without MIG holds a pair whose speed in the truth table is 0 (either
  way round), a job at speed 0 makes no progress, and the job that joined last fails
  ``oom_startup_s`` after its attempt began (as a start that cannot get its memory does):
  its attempt is lost and it is requeued at the head of the queue (``pair_failures``);
- the pair is learned: the run's pair knowledge observes it (speed 0 from then on, so a
  prediction refuses it: ``packer.corunner`` never packs a pair known at 0), it is added to
  the pairs to avoid (as the contention watch adds a pair that hurt), and a policy blind to pairs
  (``learns_pairs`` False: shard-fixed, lucid-like) runs the failed job alone next time, as
  it does after an out-of-memory beside a job.
"""
from __future__ import annotations

from dataclasses import dataclass

from packer.corunner import pair_key
from simulator.handles import JobMoves
from simulator.knowledge import PairKnowledge
from simulator.state import Gpu, Job
from simulator.workload import PairTable


@dataclass
class PairFailures:
    """``startup_s``: how long a doomed attempt runs before it fails; ``learns_pairs``: the
    policy keeps apart the pairs in ``avoid`` (else the failed job runs alone next time)."""

    startup_s: float
    gpus: list[Gpu]
    gpu_mem: int
    pairs: PairTable
    know: PairKnowledge
    avoid: set[tuple[str, str]]
    learns_pairs: bool
    moves: JobMoves
    count: int = 0  # attempts that failed beside a pair that cannot run together

    def arm(self, g: Gpu, rates: list[tuple[Job, float, bool]], now: float) -> None:
        """Before ``g``'s jobs get ``rates``: doom its newest job if a rate is 0, else none."""
        stuck = any(r <= 0.0 for _, r, _ in rates)
        newest = max(g.jobs, key=lambda j: (j.start, j.id)) if stuck else None
        for j in g.jobs:
            if j is not newest:
                j.fail_at = None
            elif j.fail_at is None:
                j.fail_at = max(now, j.start + self.startup_s)

    def fail(self, job: Job, now: float) -> None:
        """The event: ``job`` fails beside the jobs it cannot run with; the pairs are learned."""
        speed = self.pairs.speed
        g = self.gpus[job.gpu_ids[0]]
        for o in g.jobs:
            if o is not job and (speed(job.profile, o.profile) <= 0.0
                                 or speed(o.profile, job.profile) <= 0.0):
                self.know.observe(job.profile, o.profile)
                self.know.observe(o.profile, job.profile)
                self.avoid.add(pair_key(job.workload, o.workload))
        job.pair_failures += 1
        self.count += 1
        if not self.learns_pairs:
            job.remembered = max(job.remembered, self.gpu_mem)  # alone next time
        self.moves.requeue(job, now)
