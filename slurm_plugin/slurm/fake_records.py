"""What the Slurm fake (:mod:`slurm_plugin.slurm.fake`) keeps: its jobs and nodes, and the
error it raises for a command it does not model."""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["FAKE_EPOCH", "FakeJob", "FakeNode", "UnsupportedCommand"]

FAKE_EPOCH = 1_700_000_000


class UnsupportedCommand(AssertionError):
    """The fake was asked to run a command it does not model."""


@dataclass
class FakeJob:
    job_id: int
    name: str = "job.sh"
    user: str = "root"
    state: str = "PENDING"
    state_reason: str = "Priority"
    partition: str = "gpu"
    nodes: str = ""
    tres_per_node: str = ""
    tres_per_job: str = ""
    tres_per_task: str = ""
    gres_detail: list[str] = field(default_factory=list)
    admin_comment: str = ""
    comment: str = ""
    priority: int = 4294901000
    nice: int = 0
    direct_set: bool = False  # an administrator priority (Priority=N): Slurm never computes it again
    factors: int | None = None  # priority/multifactor's sum before the nice (None: the priority at submit)
    submit_time: int = FAKE_EPOCH
    start_time: int = 0
    end_time: int = 0
    exit_code: int = 0  # return code (not a wait status)
    excluded_nodes: str = ""
    required_nodes: str = ""
    restart_cnt: int = 0
    batch_host: str = ""
    exclusive: bool = False
    script: str = "#!/bin/sh\nsleep 30\n"
    requeue: bool = True  # Slurm's JobRequeue=1 default
    qos: str = ""
    time_limit_min: int | None = None  # None: unlimited (22.05 prints null)
    features: str = ""  # --constraint
    resv_name: str = ""  # --reservation
    licenses: str = ""  # -L


@dataclass
class FakeNode:
    name: str
    state: str = "IDLE"
    gres: str = "gpu:h100:2,shard:h100:16"
    gres_used: str = "gpu:h100:0(IDX:N/A),shard:h100:0(IDX:N/A)"
    partitions: tuple[str, ...] = ("gpu",)
    features: str = ""  # active features, comma-separated

