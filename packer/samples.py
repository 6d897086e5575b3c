"""What the node agent observes about a running job (the contract between agent and helper)."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

COUNTER_SOURCES = ("nvml-process", "dcgm-gr-active")
UNAVAILABLE = "unavailable: "  # + "<reason>: <why>": the GPU's counters could not be read
_REASON = re.compile(r"[a-z][a-z0-9-]{0,31}")


def unavailable_reason(source: str | None) -> str | None:
    """The reason code of an ``unavailable: <reason>: <why>`` source (``other`` when it has
    none); None for any other source."""
    if not source or not source.startswith(UNAVAILABLE):
        return None
    code, sep, _ = source[len(UNAVAILABLE):].partition(": ")
    return code if sep and _REASON.fullmatch(code) else "other"


@dataclass(frozen=True)
class JobSample:
    """One observation of one job on one GPU."""

    job_id: int
    node: str
    gpu_index: int
    at: float  # unix time
    mem_bytes: int  # GPU memory in use now
    peak_mem_bytes: int  # since the job started
    util_pct: float | None = None  # GPU utilisation attributed to the job (percent)
    throughput: float | None = None  # iterations per second, as the job reports them
    iterations: int | None = None
    isolation: str = "whole"  # "whole" | "shard:K" | "mig:<profile>@<start>" | "mps:<pct>"
    started_at: float | None = None  # when the job's step started on the GPU
    # where util_pct came from: the GPU's counters ("nvml-process", "dcgm-gr-active"), the
    # job's own "report", or "unavailable: <reason>: <why>" (util_pct None)
    util_source: str | None = None
    # the job's own checkpoint reports: when the agent got the last one, the period it gave
    last_checkpoint_at: float | None = None
    checkpoint_every_s: float | None = None

    @property
    def counted(self) -> bool:
        """Whether util_pct was measured by the GPU's counters (not reported by the job)."""
        return self.util_pct is not None and self.util_source in COUNTER_SOURCES

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "JobSample":
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})
