"""Which jobs hold this node: told by the helper over the link (the agent never asks slurmctld).

The helper lists every job once per round (one `squeue` for the whole cluster) and pushes each
node's job ids to its agent with a generation number (the helper's clock in milliseconds); an
older generation than the last one taken is refused. When no list came for
:data:`PUSHED_JOBS_MAX_AGE_S` (the helper is down or cut off) the agent knows nothing, and
frees nothing until a list comes again.

The list in hand may have been made before a job the agent isolated since: the helper lists
once a round, and a round's cycle stretches with the round (seen: 20 s cycles on a loaded
machine). ``lists`` counts the lists taken, so the reconciler (:mod:`.reconcile`) judges a
job only by a list made after it first saw the job; ``pace_s`` is the helper's measured cycle
(the median gap between its last lists), which the holds of a step's end stretch with
(:mod:`.oom_ends`).
"""
from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

PUSHED_JOBS_MAX_AGE_S = 60.0
MAX_OUTPUTS = 10000  # jobs whose output paths one list may carry
PACE_LISTS = 5  # the gaps between this many newer lists make the helper's measured pace


@dataclass(frozen=True)
class JobOutput:
    """Where Slurm writes a job's output and whose it is (Slurm's record, through the helper)."""

    uid: int
    paths: tuple[str, ...]


def parse_outputs(raw: object) -> dict[int, JobOutput]:
    """The helper's ``outputs`` (``{"job": {"uid": int, "paths": [abs path, ...]}}``);
    ValueError on anything else (the whole list is refused, nothing half taken)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or len(raw) > MAX_OUTPUTS:
        raise ValueError(f"outputs must be an object of at most {MAX_OUTPUTS} jobs")
    out: dict[int, JobOutput] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not key.isdigit() or not isinstance(value, dict):
            raise ValueError(f"outputs: bad entry for {key!r}")
        uid, paths = value.get("uid"), value.get("paths")
        if isinstance(uid, bool) or not isinstance(uid, int) or uid < 0:
            raise ValueError(f"outputs: job {key}: uid must be a non-negative integer")
        if (not isinstance(paths, list) or not 0 < len(paths) <= 2
                or not all(isinstance(p, str) and p.startswith("/") and len(p) <= 4096 for p in paths)):
            raise ValueError(f"outputs: job {key}: paths must be one or two absolute paths")
        out[int(key)] = JobOutput(uid, tuple(paths))
    return out


class PushedJobs:
    """The last job list the helper pushed; callable as the agent's ``list_running_jobs``."""

    def __init__(self, max_age_s: float = PUSHED_JOBS_MAX_AGE_S, clock: Callable[[], float] = time.monotonic):
        self.max_age_s = max_age_s
        self.clock = clock
        self.generation = -1
        self.lists = 0  # lists of newer generations taken since the agent started
        self._jobs: set[int] | None = None
        self._outputs: dict[int, JobOutput] = {}
        self._gpus: dict[int, tuple[int, ...]] = {}  # job -> the GPU indexes Slurm's record gives it here
        self._shards: dict[int, int] = {}  # job -> the shards Slurm's record gives it here (0: whole GPUs)
        self._at = 0.0
        self._gaps: deque[float] = deque(maxlen=PACE_LISTS)  # seconds between newer lists
        self._newer_at: float | None = None  # when the last newer list came (a retry does not move it)
        self._lock = threading.Lock()

    def take_outputs(self, outputs: dict[int, JobOutput]) -> None:
        """Where the listed jobs write their output (kept for a job until a list leaves it out:
        a step that ends just after its job left the list is still read)."""
        with self._lock:
            listed = self._jobs or set()
            self._outputs = {**{j: o for j, o in self._outputs.items() if j in listed}, **outputs}

    def output_of(self, job_id: int) -> JobOutput | None:
        with self._lock:
            return self._outputs.get(job_id)

    def update(self, job_ids: list[int], generation: int, gpus: dict[int, tuple[int, ...]] | None = None,
               shards: dict[int, int] | None = None) -> bool:
        """Take a pushed list; False (and nothing taken) when ``generation`` is older than the last."""
        with self._lock:
            if generation < self.generation:
                return False
            now = self.clock()
            if generation > self.generation:  # the same list again (a retry) is not a newer one
                if self._newer_at is not None:
                    self._gaps.append(max(0.0, now - self._newer_at))
                self._newer_at = now
                self.lists += 1
            self.generation = generation
            self._jobs = set(job_ids)
            self._gpus = dict(gpus or {})
            self._shards = dict(shards or {})
            self._at = now
            return True

    def pace_s(self) -> float | None:
        """The helper's cycle as this agent sees it: the median gap between its last
        :data:`PACE_LISTS` newer lists (None before two lists came)."""
        with self._lock:
            return statistics.median(self._gaps) if self._gaps else None

    def gpus_of(self, job_id: int) -> tuple[int, ...] | None:
        """The GPUs Slurm's record gives ``job_id`` on this node, from a list not older than
        ``max_age_s``; None when unknown (not listed yet: a job newer than the last list)."""
        with self._lock:
            if self._jobs is None or self.clock() - self._at > self.max_age_s:
                return None
            return self._gpus.get(job_id)

    def shards_of(self, job_id: int) -> int | None:
        """The shards Slurm's record gives ``job_id`` on this node (0: whole GPUs), as :meth:`gpus_of`;
        None when unknown."""
        with self._lock:
            if self._jobs is None or self.clock() - self._at > self.max_age_s:
                return None
            return self._shards.get(job_id)

    def __call__(self) -> set[int] | None:
        with self._lock:
            if self._jobs is None or self.clock() - self._at > self.max_age_s:
                return None
            return set(self._jobs)
