"""Decided again at dispatch: a pending packed job whose turn comes while
a whole GPU is idle gets the whole GPU back (its request restored before it starts). Pure.

The packer packs a job at submit when no whole GPU is idle *then*; by the time the job's
turn comes one may be. The replay's colocate decides at scheduling time and starts such a
job alone on the idle GPU; live, the helper restores the job's request before Slurm starts
it on a share.

The queue is walked in Slurm's order (priority, highest first; ties to the older job id). A
whole-GPU job takes an idle GPU it may use, or, finding none, stops the walk (the jobs behind
it wait for their turn, or for Slurm's backfill: not this rule's business). A packed job
finding an idle GPU it may use gets it (the rule names it) when the idle GPUs left are enough
for every packed job still waiting in the walk; finding none, or fewer idle GPUs than packed
jobs waiting, it starts on shares as it was packed to, and the walk goes on. The second
condition is the load-aware rule's: when packed jobs outnumber the idle GPUs, giving the first
a GPU of its own leaves the others waiting for one, where together on shares they all run now
(and a cluster whose GPUs are all held whole would otherwise never start to pack: each freed
GPU would go, whole, to the next packed job).

The other way (`packed_at_dispatch`): a job made exclusive at submit only because a whole GPU
was idle then, and whose history says it fits a share, is packed when its turn comes with no
idle whole GPU it may use (the replay's colocate packs it then; live, the helper rewrites its
request before it starts).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class QueuedJob:
    """A pending GPU job as the dispatch rule sees it."""

    job_id: int
    priority: int
    packed: bool  # asks for shares (the packer packed it)
    gpus: int = 1  # whole GPUs it asks for (a packed job: the one it was packed from)
    excluded: frozenset[str] = frozenset()  # nodes it may not use (-x, the helper's)
    required: frozenset[str] = frozenset()  # nodes it must use (-w): empty, any
    repack: bool = False  # made exclusive at submit because a GPU was idle then, and fits a share


def _usable(job: QueuedJob, node: str) -> bool:
    return node not in job.excluded and (not job.required or node in job.required)


def whole_gpu_back(queue: Sequence[QueuedJob], idle: Mapping[str, int]) -> list[tuple[int, str]]:
    """The packed jobs whose turn comes while a whole GPU they may use is idle, with the node
    of that GPU, in the order they come; ``idle``: idle whole GPUs per usable node."""
    left = {n: c for n, c in idle.items() if c > 0}
    out: list[tuple[int, str]] = []
    ordered = sorted(queue, key=lambda j: (-j.priority, j.job_id))
    # the packed jobs that could take one of the idle GPUs (a job kept off them does not count)
    could = {j.job_id for j in ordered if j.packed and any(_usable(j, n) for n in left)}
    packed_waiting = len(could)
    scarce = False  # fewer idle GPUs than packed jobs waiting: from there on, all start on shares
    for job in ordered:
        node = next((n for n in sorted(left) if left[n] >= job.gpus and _usable(job, n)), None)
        if job.packed:
            if job.job_id in could:
                scarce = scarce or sum(left.values()) < packed_waiting  # not a whole GPU each for them
                packed_waiting -= 1
            if node is None or scarce:
                continue  # it starts on shares, as packed
        elif node is None:
            break  # a whole-GPU job waits: the jobs behind it are not at their turn
        left[node] -= job.gpus
        if not left[node]:
            del left[node]
        if job.packed:
            out.append((job.job_id, node))
    return out


def packed_at_dispatch(queue: Sequence[QueuedJob], idle: Mapping[str, int]) -> list[int]:
    """The other way: the jobs made exclusive at submit because a whole GPU was idle then
    (``repack``: their history says they fit a share) that find no idle whole GPU they may
    use at their turn now, in the order they come. Walking the queue in Slurm's order, every
    whole-GPU job (these included) takes an idle GPU it may use; a ``repack`` job left with
    none would wait for a whole GPU, where on shares it runs beside others now. Packed jobs
    take no idle GPU here (`whole_gpu_back` decides those)."""
    left = {n: c for n, c in idle.items() if c > 0}
    out: list[int] = []
    for job in sorted(queue, key=lambda j: (-j.priority, j.job_id)):
        if job.packed:
            continue
        node = next((n for n in sorted(left) if left[n] >= job.gpus and _usable(job, n)), None)
        if node is None:
            if job.repack:
                out.append(job.job_id)
            continue
        left[node] -= job.gpus
        if not left[node]:
            del left[node]
    return out
