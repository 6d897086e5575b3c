"""The replay's running state: a job (:class:`Job`) and a GPU (:class:`Gpu`).

Plain ``__slots__`` classes rather than dataclasses: the loop touches their fields millions
of times in a run, and slots keep that fast.
"""
from __future__ import annotations

from mig.fsm import PartitionState, Placement
from simulator.workload import SimJobSpec, WorkloadProfile


class Job:
    __slots__ = (
        "spec", "id", "submit", "duration", "gpus", "profile", "mem0", "mem1", "util", "label",
        "workload", "first_start", "start", "end", "done", "rate", "last_t", "token",
        "gpu_ids", "cap", "shards", "inst", "remembered", "min_rate", "oom_restarts",
        "pred_restarts", "preemptions", "lost_work", "warn_work", "warn_next", "shared_with",
        "unmeasured", "max_pair_slow", "packed_at", "t_end", "room", "pack_pred", "pack_base",
        "moves", "fail_at", "pair_failures", "jump_at", "oom_failed", "guess", "kinds_at",
    )

    def __init__(self, spec: SimJobSpec, prof: WorkloadProfile):
        self.spec = spec
        self.id = spec.id
        self.submit = spec.submit
        self.duration = spec.duration
        self.gpus = spec.gpus
        self.profile = spec.profile
        self.mem0 = spec.mem0
        self.mem1 = spec.mem1
        self.util = max(1.0, prof.util_pct)
        self.label = prof.label
        self.workload = prof.key
        self.first_start: float | None = None
        self.start = 0.0
        self.end: float | None = None
        self.done = 0.0
        self.rate = 1.0
        self.last_t = 0.0
        self.token = 0
        self.gpu_ids: list[int] = []
        self.cap = 0  # memory the job may use, bytes
        self.shards: int | None = None
        self.inst: Placement | None = None
        self.remembered = 0  # bytes learnt from a restart for memory
        self.min_rate = 1.0
        self.oom_restarts = 0
        self.pred_restarts = 0
        self.preemptions = 0
        self.lost_work = 0.0
        self.warn_work: float | None = None
        self.warn_next: int | None = None
        self.shared_with: set[int] = set()
        self.unmeasured = False
        self.max_pair_slow = 1.0  # worst 1/speed among the measured pairs it was in
        self.packed_at: float | None = None
        self.t_end = 0.0  # expected end at the current rate
        self.room = 0  # memory it can really get: cap, less its neighbours' without isolation
        self.pack_pred: tuple[dict[int, float], bool] | None = None  # speeds predicted at pack
        self.pack_base: dict[int, float] = {}  # its neighbours' speeds just before it joined
        self.moves = 0  # times regrouping moved it
        self.fail_at: float | None = None  # when it fails beside a pair that cannot run together
        self.pair_failures = 0  # attempts that failed so (simulator.pair_failure)
        self.jump_at = spec.jump_at  # its memory jumps mem0 -> mem1 at this fraction of its work
        self.oom_failed = False  # left FAILED out of memory (retries spent: packer.oom_restart)
        self.guess = (0, 0)  # identity level of its history and error draw (simulator.recurrence)
        # colocate's co-runner memo for it while queued, and what that rests on (ColocatePolicy._kinds_for)
        self.kinds_at: tuple | None = None

    def left(self, now: float) -> float:
        """The work a running job has left, in seconds alone."""
        return max(0.0, self.duration - self.done - (now - self.last_t) * self.rate)


class Gpu:
    __slots__ = ("id", "jobs", "whole", "state", "inst", "busy", "util_c", "mem_c", "static")

    def __init__(self, gid: int):
        self.id = gid
        self.jobs: list[Job] = []
        self.whole = False  # held by a job that takes the whole GPU (no MIG instances)
        self.state: PartitionState | None = None
        self.inst: dict[Placement, Job | None] = {}
        self.busy = 0  # busy MIG instances
        self.util_c = 0.0
        self.mem_c = 0.0
        self.static = False
