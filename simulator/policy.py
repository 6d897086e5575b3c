"""The one interface every simulated policy has: :class:`Policy`.

The loop (:class:`~simulator.engine.Simulator`) starts multi-GPU jobs on whole
idle GPUs for every policy, and asks the policy for everything about one-GPU jobs:

- :meth:`Policy.place`: start this job now, if the policy finds it room (True), honouring
  the head's reservation ``bf`` (None: the job is the head);
- :meth:`Policy.may_place_busy`: a cheap test, could a one-GPU job start anywhere but on an
  idle GPU (a backfill pass skips one-GPU jobs when neither is possible);
- :meth:`Policy.shape`: jobs of one shape fail the same tests (the fast path's memo);
- :meth:`Policy.no_room`: a cheap test, would :meth:`Policy.place` fail for want of room as
  it did for a job of this shape, nothing it reads having changed since (the fast path skips
  the job);
- :attr:`Policy.holds`: None, or the refused packs known to stay refused a while
  (colocate's :class:`~simulator.refusal_hold.RefusalHolds`): the fast path counts such a
  job as tried and refused, and answers a pass that would only refuse them again
  (:class:`~simulator.steady_pass.SteadyPass`);
- :meth:`Policy.order`: the order a backfill pass tries its candidates in;
- :meth:`Policy.joined` / :meth:`Policy.left`: a job joined a GPU shared with others, a job
  left a GPU where others still run (the policy's own indexes, its watches);
- :meth:`Policy.check`: the contention watch's event (``monitor_s`` after a pack);
- :meth:`Policy.summary`: the policy's own figures for the report.

The implementations are chosen by name in :mod:`~simulator.registry`.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, ClassVar

from mig.catalog import Catalog
from packer.rules import SuiteRules
from simulator.cluster import Cluster
from simulator.config import SimConfig
from simulator.handles import JobMoves
from simulator.knowledge import PairKnowledge
from simulator.mig_state import MigState
from simulator.events import EventLoop
from simulator.recurrence import Guesses
from simulator.releases import ReleaseIndex
from simulator.scheduling import Backfill, Scheduler
from simulator.sharing import ShareIndex
from simulator.state import Gpu, Job
from simulator.workload import WorkloadProfile

if TYPE_CHECKING:
    from simulator.refusal_hold import RefusalHolds


@dataclass(frozen=True)
class PolicyHandles:
    """What a policy is given of the run: its settings and rules, the cluster's GPUs and
    indexes, the queue, the pair knowledge and the job moves (each policy uses some)."""

    cfg: SimConfig
    rules: SuiteRules
    profiles: list[WorkloadProfile]
    catalog: Catalog
    gpu_mem: int
    share_bytes: int
    gpus: list[Gpu]
    idle: dict[int, None]
    shares: ShareIndex
    releases: ReleaseIndex
    loop: EventLoop
    sched: Scheduler
    cluster: Cluster
    mig: MigState | None
    know: PairKnowledge
    avoid: set[tuple[str, str]]
    history: set[int]
    moves: JobMoves
    guesses: Guesses | None = None  # colocate with identity levels (simulator.recurrence)


class Policy:
    """A policy's start rule and hooks; the defaults are those of a policy that shares nothing."""

    name: ClassVar[str] = ""
    packs: ClassVar[bool] = False  # puts one-GPU jobs beside others without isolation or MIG
    uses_mig: ClassVar[bool] = False  # one-GPU jobs run on MIG instances
    learns_pairs: ClassVar[bool] = False  # keeps apart the pairs to avoid (``avoid``)
    # the refused packs that surely stay refused a while (None: every job is tried)
    holds: "RefusalHolds | None" = None

    def __init__(self, h: PolicyHandles):
        for f in fields(h):  # each handle an attribute of its own: self.gpus, self.sched, ...
            setattr(self, f.name, getattr(h, f.name))

    def place(self, job: Job, now: float, bf: Backfill | None) -> bool:
        raise NotImplementedError

    def may_place_busy(self) -> bool:
        return True

    def shape(self, job: Job) -> tuple:
        return ("p", job.profile, job.remembered)  # the profile fixes memory and utilisation

    def no_room(self, job: Job) -> bool:
        return False  # no memo: every job is tried

    def order(self, cand: list[Job]) -> list[Job]:
        return cand

    def joined(self, g: Gpu, job: Job, now: float, was_busy: bool) -> None:
        pass

    def left(self, g: Gpu) -> None:
        pass

    def check(self, job: Job, now: float) -> None:
        pass

    def summary(self) -> dict:
        return {}
