"""What the monitor knows of each running job (`Track`; `track_watch.TrackWatch` keeps it)."""
from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from mig.catalog import load_catalog
from mig.errors import MigError
from packer import comment as comment_mod
from packer.curves import partition_capacity
from packer.gres import count_of, type_of
from slurm_plugin.history_recorder import job_identity, note_identity
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)

SAMPLES_KEPT = 600
ACTIVE = ("RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING")


@dataclass
class Track:
    """What the monitor knows of one running job."""

    job_id: int
    fingerprint: str | None
    node: str
    gpu_index: int
    isolation: str
    started_at: float
    shards: int | None  # shares Slurm gave it (None: whole GPUs)
    user: str = ""
    name: str = ""
    samples: deque = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))
    forecaster: object | None = None
    forecast_step: float = -1.0  # the step of the newest sample in the forecaster
    memory_judged_step: float = -1.0  # the memory watch's last judgement was on this step
    kept_reported: bool = False  # the memory watch said once why it lets this run go on
    last_state: str | None = None

    @property
    def packed(self) -> bool:
        return self.shards is not None or self.isolation.startswith(("mig:", "mps:", "shard:"))

    def throughput(self) -> tuple[tuple[float, float], ...]:
        return tuple((s.at, s.throughput) for s in self.samples if s.throughput is not None)


def submit_time_exclusion(admin_comment: str | None) -> frozenset[str]:
    """Nodes the submit path added to the job's excluded nodes (`avoid=` of its record)."""
    record = comment_mod.parse(admin_comment)
    avoid = record.fields.get("avoid") if record is not None else None
    return frozenset(n for n in avoid.split(",") if n) if avoid else frozenset()


_UNKNOWN_PROFILES: set[tuple[str, str]] = set()  # (GPU model, profile) already reported


def partition_of(track: Track, share_bytes: float, gpu_model: str) -> tuple[float | None, str]:
    """The bytes the job may use and their label: its MIG slice, else its shares; (None, "")
    for whole GPUs (`packer.curves.partition_capacity`)."""

    def profile_mib(profile: str) -> int | None:
        try:
            return load_catalog(gpu_model).profile(profile).memory_mib
        except MigError as exc:  # the agent isolated it on a slice this catalogue does not hold
            if (gpu_model, profile) not in _UNKNOWN_PROFILES:
                _UNKNOWN_PROFILES.add((gpu_model, profile))
                log.error("job %d runs on MIG %s, which the %s catalogue does not hold (%s): its memory is "
                          "judged against its %s; check [paths] gpu_model and the node's GPU", track.job_id,
                          profile, gpu_model, exc, f"{track.shards} shares" if track.shards else "whole GPU")
            return None

    return partition_capacity(track.isolation, track.shards, share_bytes, profile_mib)


def capacity_of(track: Track, share_bytes: float, gpu_model: str) -> float | None:
    """Bytes the job may use: its MIG slice, else its shares; None for whole GPUs."""
    return partition_of(track, share_bytes, gpu_model)[0]


def job_shards(job: Job) -> int | None:
    """Shards a job holds or asks for (per node); None when it holds none. (Each watch asks it of
    every job each round: the two lists are walked in place, no tuple built.)"""
    for items in (job.gres_detail, job.gres):
        for item in items:
            if item.name == "shard":
                return item.count
    return None


def job_gpu_type(job: Job) -> str | None:
    """The GPU type a job asked for (`shard:h100:2` -> h100): a restart or a grow asks for that
    type again, so the job never comes back on another model. None: it asked untyped (the
    type of the GPU it holds is not added: 22.05 refuses an update that types an untyped
    request, "Invalid GRES specification (with and without type identification)"; the submit
    path types packed jobs when `[packer] gpu_type` is set)."""
    return type_of(job.gres, ("shard", "gpu"))


def wants_whole_gpu(job: Job) -> bool:
    return any(item.name == "gpu" for item in job.gres)


class Fingerprints:
    """A job's fingerprint, cached: its identity kept by job id in the store the first time the
    watcher sees the job (`history_recorder.note_identity`), so the end of each of its runs
    reads it there; None when Slurm cannot give its batch script (a job without `fp=`)."""

    def __init__(self, runner: Callable[[], object], store: Callable[[], object] | None = None):
        self._runner = runner  # the monitor's runner of the moment (tests swap it)
        self._store = store  # the monitor's store of the moment
        self._cache: dict[int, str | None] = {}

    def job_maps(self) -> list:
        return [self._cache]

    def __call__(self, job: Job) -> str | None:
        if job.job_id in self._cache:
            return self._cache[job.job_id]
        try:
            if self._store is None:
                fp: str | None = job_identity(self._runner(), job.job_id, job).fingerprint
            else:
                fp = note_identity(self._store(), self._runner(), job).fingerprint
        except SlurmError as exc:
            log.info("job %d: no fingerprint (%s)", job.job_id, exc)
            fp = None
        self._cache[job.job_id] = fp
        return fp
