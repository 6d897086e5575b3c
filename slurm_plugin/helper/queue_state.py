"""The queue as the load-aware admission rule reads it, from the watcher's job listing.

The watcher already lists the jobs every round (squeue); this adapter keeps, in the cluster
view it publishes, what the submit path needs to judge a pack without calling Slurm:

- ``waiting``: pending GPU jobs that may run (not held);
- ``gpus``: the GPUs of the usable nodes;
- ``releases_s``: for each busy GPU, when it frees (seconds after the view was taken: the
  last of its jobs' ends by their time limits; a GPU with a job without a limit is left out);
- ``shared``: the GPUs that hold shards, with each packed job there (fingerprint, shards,
  work left by its time limit, None without one).

A job's time limit is what Slurm knows of when it ends; it is an upper bound (a job may end
sooner), which makes the wait for a whole GPU look longer than it is: the rule then packs a
little more readily than the replay's, never with a job it must avoid or under the floor.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from slurm_plugin.slurm.gres import expand_hostlist
from slurm_plugin.slurm.model import Job

RUNNING = ("RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING")


@dataclass(frozen=True)
class SharedJob:
    job_id: int
    fingerprint: str | None
    shards: int
    left_s: float | None  # by its time limit; None: no limit known


@dataclass(frozen=True)
class SharedGpu:
    node: str
    index: int
    jobs: tuple[SharedJob, ...]

    @property
    def gpu_id(self) -> str:
        return f"{self.node}:{self.index}"


@dataclass(frozen=True)
class QueueState:
    waiting: int
    gpus: int
    releases_s: tuple[float, ...]
    shared: tuple[SharedGpu, ...]

    def to_doc(self) -> dict:
        return {"waiting": self.waiting, "gpus": self.gpus, "releases_s": list(self.releases_s),
                "shared": [{"node": g.node, "index": g.index,
                            "jobs": [[j.job_id, j.fingerprint, j.shards, j.left_s] for j in g.jobs]}
                           for g in self.shared]}

    @classmethod
    def from_doc(cls, doc: dict) -> "QueueState":
        shared = tuple(SharedGpu(str(g["node"]), int(g["index"]), tuple(
            SharedJob(int(j[0]), j[1], int(j[2]), None if j[3] is None else float(j[3])) for j in g["jobs"]))
            for g in doc["shared"])
        return cls(int(doc["waiting"]), int(doc["gpus"]), tuple(float(r) for r in doc["releases_s"]), shared)


def _fingerprint(job: Job) -> str | None:
    from packer import comment

    record = comment.parse(job.admin_comment)
    return record.fingerprint if record else None


def _left_s(job: Job, now: float) -> float | None:
    if not job.time_limit_s:
        return None
    started = job.start_time.timestamp() if job.start_time else now
    return max(0.0, started + job.time_limit_s - now)


def _wants_gpu(job: Job) -> bool:
    return any(item.name in ("gpu", "shard") for item in job.gres)


def queue_state(jobs: Iterable[Job], gpus: int, now: float) -> QueueState:
    """The queue from one job listing taken at ``now``; ``gpus``: the usable nodes' GPUs."""
    waiting = 0
    ends: dict[tuple[str, int], float | None] = {}
    shared: dict[tuple[str, int], list[SharedJob]] = {}
    for job in jobs:
        if job.state == "PENDING":
            waiting += int(not job.held and _wants_gpu(job))
            continue
        if job.state not in RUNNING:
            continue
        left = _left_s(job, now)
        for node, item in zip(expand_hostlist(job.nodes), job.gres_detail):
            if item.name not in ("gpu", "shard"):
                continue
            for index in item.indexes or ():
                key = (node, index)
                before = ends.get(key, 0.0)
                ends[key] = None if left is None or (key in ends and before is None) else max(before or 0.0, left)
                if item.name == "shard":
                    shared.setdefault(key, []).append(SharedJob(job.job_id, _fingerprint(job), item.count, left))
    releases = tuple(sorted(e for e in ends.values() if e is not None))
    return QueueState(waiting, gpus, releases,
                      tuple(SharedGpu(n, i, tuple(js)) for (n, i), js in sorted(shared.items())))
