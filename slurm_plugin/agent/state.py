"""The node agent's persistent state: one JSON document per node, replaced atomically.

It holds every job the agent isolated (GPU, MIG instance or MPS share, report token,
running totals of its samples), so a restarted agent knows what it had before it
reconciles with the GPU and with Slurm.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from store.jsonfile import write_json_atomic

log = logging.getLogger(__name__)

STATE_VERSION = 1
BATCH_STEP = 0xFFFFFFFB  # SLURM_BATCH_SCRIPT
EXTERN_STEP = 0xFFFFFFFC  # SLURM_EXTERN_CONT
INTERACTIVE_STEP = 0xFFFFFFFA  # SLURM_INTERACTIVE_STEP (salloc's step, LaunchParameters=use_interactive_step)


@dataclass
class Assignment:
    """The isolation one job holds on this node, and what the agent saw of it."""

    job_id: int
    node: str
    gpu_index: int
    kind: str  # whole | mig | mps | none
    isolation: str  # JobSample.isolation: whole | mig:<profile>@<start> | mps:<pct>
    shards: int = 0
    uid: int | None = None
    profile: str | None = None
    start: int | None = None
    gi_id: int | None = None
    device_uuid: str | None = None  # the device the job's memory is on (MIG-… or GPU-…)
    mem_limit_bytes: int | None = None
    created_instance: bool = False  # the agent made the MIG instance (and destroys it)
    env: dict[str, str] = field(default_factory=dict)
    token: str = ""
    steps: list[int] = field(default_factory=list)
    created_at: float = 0.0
    started_at: float | None = None
    # what the job reported about itself (bounded, see trust.ReportGuard)
    workload: str | None = None
    iterations: int | None = None
    throughput: float | None = None
    util_pct: float | None = None
    last_report_at: float | None = None
    last_checkpoint_at: float | None = None  # the agent's time of its last checkpoint report
    checkpoint_every_s: float | None = None  # the period it reported
    checkpoints: int = 0
    reports: int = 0
    rejected_reports: int = 0
    # running totals of the samples
    samples: int = 0
    util_sum: float = 0.0
    util_n: int = 0
    throughput_sum: float = 0.0
    throughput_n: int = 0
    peak_mem_bytes: int = 0
    last_mem_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    last_sampled_at: float | None = None  # the agent's time of its newest sample of the job
    gap_s: float = 0.0  # seconds the job ran without samples (the agent was down or stuck)
    first_sampled_at: float | None = None  # the agent's time of its first sample of the job
    alloc_peak_bytes: int | None = None  # the largest allocator peak the job reported (trust.Accepted)

    @property
    def owner(self) -> str:
        """The owner name of the job's memory and MIG instance on the (simulated) GPU."""
        return str(self.job_id)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Assignment":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class StateFile:
    """Load and save the assignments of one node (``<dir>/state.json``, mode 0600)."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.path = self.directory / "state.json"

    def load(self) -> dict[int, Assignment]:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            broken = self.path.with_suffix(".broken")
            log.error("cannot read %s (%s); keeping it as %s and starting from the GPU's own state",
                      self.path, exc, broken)
            try:
                self.path.replace(broken)
            except OSError:
                pass
            return {}
        if doc.get("version") != STATE_VERSION:
            log.error("%s has version %r, expected %d; ignoring it", self.path, doc.get("version"), STATE_VERSION)
            return {}
        return {int(k): Assignment.from_dict(v) for k, v in doc.get("jobs", {}).items()}

    def save(self, jobs: dict[int, Assignment]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        doc = {"version": STATE_VERSION, "jobs": {str(k): v.to_dict() for k, v in sorted(jobs.items())}}
        write_json_atomic(self.path, doc, fsync=True)


__all__ = ["Assignment", "StateFile", "write_json_atomic"]
