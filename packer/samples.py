"""What the node agent observes about a running job (the contract between agent and helper)."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class JobSample:
    """One observation of one job on one GPU."""

    job_id: int
    node: str
    gpu_index: int
    at: float  # unix time
    mem_bytes: int  # GPU memory in use now
    peak_mem_bytes: int  # since the job started
    util_pct: float | None = None  # GPU utilisation attributed to the job
    throughput: float | None = None  # iterations per second, as the job reports them
    iterations: int | None = None
    isolation: str = "whole"  # "whole" | "shard:K" | "mig:<profile>@<start>" | "mps:<pct>"
    started_at: float | None = None  # when the job's step started on the GPU

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "JobSample":
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})
