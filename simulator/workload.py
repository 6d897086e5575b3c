"""The simulated workload: jobs from a trace, each given a measured workload profile.

Data (see ``shared/data/PROVENANCE.md``):

- ``philly_jobs.csv``: arrivals, durations and GPU counts (Microsoft Philly, 2017);
- ``workload_profiles.csv``: 66 training configurations measured alone (memory, GPU
  utilisation, throughput, Lucid's sharing label);
- ``colocation_pairs.csv``: 1,388 measured pairs, each job's speed relative to alone.

Each job is given a profile by a seeded draw (Philly has no job names), or, for a site's
``sacct`` export, by a hash of (user, job name) so that repeated runs of one workload get
the same profile. A job of the export that carries its own GPU figures (``gres/gpumem`` in
``TRESUsageInMax``, ``gres/gpuutil`` in ``TRESUsageInAve``, from Slurm's GPU accounting)
gets a profile of its own from them (memory to 2 GiB, utilisation to 10 %): the policies
predict its pairs from those features like any unseen pair; the replay slows it as the
measured workload closest to it in utilisation and memory would be (:func:`own_profiles`). A fraction of one-GPU jobs *grow*: their memory starts at the profile's
measured value (what the history estimate sees) and rises linearly with progress to a
larger peak; they are the jobs the predictor is for.

Pair speeds above 1 (measurement noise) are clamped to 1: no job runs faster shared than
alone. An unmeasured pair (38 % of the ordered pairs of the data) is imputed from the
measured pairs of the same job: the mean of its measured speeds beside the ``IMPUTE_K``
partners closest to the other job in utilisation and memory (the data's own rows; measured
pairs lose 8 % on average where processor sharing by utilisation, the previous rule, would
give 1.0 to every pair under 100 % together). A job with no measured partner falls back to
processor sharing: ``min(1, 100 / (util_a + util_b))``. Hand-made tables (tests) keep that
fallback for every unmeasured pair. More than two jobs on one GPU: the product of the pair
speeds (an extrapolation; the suite's packers never do it). What the policies know of these
numbers is :mod:`simulator.knowledge` (by default only what the replay has
run; the rest predicted from per-job features).
"""
from __future__ import annotations

import csv
import hashlib
import logging
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path

from packer.pair_knowledge import sharing_label
from simulator.rows import WorkloadError  # noqa: F401 (re-exported)
from simulator.truth import profile_key, read_pair_table

log = logging.getLogger(__name__)

MIB = 1 << 20


@dataclass(frozen=True)
class WorkloadProfile:
    index: int
    key: str  # model/dataset/batch/amp
    mem_bytes: int
    util_pct: float
    throughput: float
    label: int  # Lucid's sharing label: 0 tiny, 1 medium, 2 jumbo


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace, before profiles are given."""

    submit: float
    duration: float
    gpus: int
    workload: str = ""  # user/name when the trace has them
    mem_bytes: int | None = None  # its own peak GPU memory (sacct gres/gpumem)
    util_pct: float | None = None  # its own mean GPU utilisation (sacct gres/gpuutil)
    share: float | None = None  # asked for this share (< 1) of one GPU: gres/gpu=0.5


@dataclass(frozen=True)
class SimJobSpec:
    id: int
    submit: float
    duration: float  # seconds, running alone
    gpus: int
    profile: int  # index into the profile table
    mem0: int  # memory at start, bytes (the estimate history gives)
    mem1: int  # peak memory at the end of the run (== mem0 unless growing)
    own: bool = False  # its profile comes from its own GPU figures (sacct), not a draw
    # a growing job's memory jumps from mem0 to mem1 in one step at this fraction of its work
    # (predictor/data/stress.py's level_shift shape; most real crossings are one-step jumps); None: linear
    jump_at: float | None = None

    @property
    def grows(self) -> bool:
        return self.mem1 > self.mem0


IMPUTE_K = 5


class PairTable:
    """Measured speeds of two profiles run together; with the documented fallback."""

    def __init__(self, profiles: list[WorkloadProfile], measured: dict[tuple[int, int], float],
                 impute: bool = False, proxy: dict[int, int] | None = None):
        self.profiles = profiles
        self.measured = measured  # (a, b) -> speed of a beside b
        self.proxy = proxy or {}
        n = len(profiles)
        rows: dict[int, list[int]] = {}
        for a, b in measured:
            rows.setdefault(a, []).append(b)
        self._speed = [[0.0] * n for _ in range(n)]
        for a in range(n):
            for b in range(n):
                if a in self.proxy or b in self.proxy:
                    continue
                s = measured.get((a, b))
                if s is None:
                    s = self.impute(a, b, rows.get(a, ())) if impute else None
                self._speed[a][b] = self.fallback(a, b) if s is None else s
        for a in range(n):  # a site's own jobs: as their closest measured workload
            for b in range(n):
                if a in self.proxy or b in self.proxy:
                    self._speed[a][b] = self._speed[self.proxy.get(a, a)][self.proxy.get(b, b)]

    def impute(self, a: int, b: int, partners) -> float | None:
        """Mean speed of ``a`` beside its measured partners closest to ``b``."""
        if not partners:
            return None
        pb = self.profiles[b]

        def dist(c: int) -> tuple[float, int]:
            pc = self.profiles[c]
            return (abs(pc.util_pct - pb.util_pct) / 100.0
                    + abs(pc.mem_bytes - pb.mem_bytes) / (16 << 30), c)

        near = sorted(partners, key=dist)[:IMPUTE_K]
        return sum(self.measured[(a, c)] for c in near) / len(near)

    def fallback(self, a: int, b: int) -> float:
        total = self.profiles[a].util_pct + self.profiles[b].util_pct
        return 1.0 if total <= 100 else 100.0 / total

    def speed(self, a: int, b: int) -> float:
        """Speed of profile ``a`` (relative to alone) beside profile ``b``."""
        return self._speed[a][b]

    def is_measured(self, a: int, b: int) -> bool:
        return (a, b) in self.measured


#: the checkout this package is in (simulator/workload.py -> its root)
_CHECKOUT = Path(__file__).resolve().parents[1]


def default_data_dir() -> Path | None:
    """``$GPUPACK_DATA_DIR``, else the checkout's ``shared/data/traces`` (in it, or beside it),
    found from where this package is, whatever the working folder; None when neither holds
    ``philly_jobs.csv``."""
    env = os.environ.get("GPUPACK_DATA_DIR")
    if env:
        return Path(env)
    for base in (_CHECKOUT, _CHECKOUT.parent):
        cand = base / "shared" / "data" / "traces"
        if (cand / "philly_jobs.csv").exists():
            return cand
    return None


def _data_file(data_dir: Path | None, name: str) -> Path:
    d = data_dir or default_data_dir()
    if d is None or not (Path(d) / name).exists():
        raise WorkloadError(
            f"cannot find {name}; pass --data-dir DIR (the folder holding philly_jobs.csv, "
            f"workload_profiles.csv, colocation_pairs.csv) or set GPUPACK_DATA_DIR")
    return Path(d) / name


def load_profiles(data_dir: Path | None = None, truth: str | Path | None = None
                  ) -> tuple[list[WorkloadProfile], PairTable]:
    """The measured profiles and the pair table the replay slows packed jobs by: ``truth``
    (:mod:`simulator.truth`), else the measured ``colocation_pairs.csv``."""
    path = _data_file(data_dir, "workload_profiles.csv")
    profiles: list[WorkloadProfile] = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            profiles.append(WorkloadProfile(
                index=len(profiles),
                key=profile_key(row["model"], row["dataset"], row["batchsize"], row["amp"]),
                mem_bytes=int(float(row["gmem"]) * MIB),
                util_pct=float(row["gpu_util"]),
                throughput=float(row["speed"]),
                label=int(row["label"]),
            ))
    table = Path(truth) if truth else _data_file(data_dir, "colocation_pairs.csv")
    measured = read_pair_table(table, [p.key for p in profiles])
    return profiles, PairTable(profiles, measured, impute=True)


_label = sharing_label  # Lucid's sharing label from utilisation alone (packer.pair_knowledge)


def own_profiles(trace: list[TraceJob], profiles: list[WorkloadProfile], pairs: PairTable
                 ) -> tuple[list[WorkloadProfile], PairTable, dict[int, int]]:
    """Profiles for the jobs that carry their own GPU figures (by memory to 2 GiB and
    utilisation to 10 %, at most 41 x 11 of them; a figure missing is the closest measured workload's), and a pair
    table where each of them runs as the measured workload closest to it (utilisation,
    then memory). Returns (all profiles, pair table, trace index -> profile index)."""
    out = list(profiles)
    proxy: dict[int, int] = {}
    by_key: dict[tuple[int, int], int] = {}
    which: dict[int, int] = {}

    def closest(mem: float | None, util: float | None) -> WorkloadProfile:
        return min(profiles, key=lambda p: (
            (abs(p.util_pct - util) / 100.0 if util is not None else 0.0)
            + (abs(p.mem_bytes - mem) / (16 << 30) if mem is not None else 0.0), p.index))

    for i, t in enumerate(trace):
        if t.mem_bytes is None and t.util_pct is None:
            continue
        near = closest(t.mem_bytes, t.util_pct)
        mem = t.mem_bytes if t.mem_bytes is not None else near.mem_bytes
        gib = max(1, 2 * round(mem / (2 << 30)))
        util = 10 * round((t.util_pct if t.util_pct is not None else near.util_pct) / 10)
        util = min(100, max(5, util))
        key = (gib, util)
        idx = by_key.get(key)
        if idx is None:
            idx = by_key[key] = len(out)
            out.append(WorkloadProfile(idx, f"own/{gib}GiB/util{util}", gib << 30, float(util),
                                       0.0, _label(util)))
            proxy[idx] = closest(gib << 30, float(util)).index
        which[i] = idx
    if not which:
        return profiles, pairs, {}
    return out, PairTable(out, pairs.measured, impute=True, proxy=proxy), which


MAX_TIME_SCALE = 1000.0  # arrivals stretched further: no replay (and no finite sum)


def build_jobs(
    trace: list[TraceJob],
    profiles: list[WorkloadProfile],
    seed: int = 0,
    jobs: int | None = None,
    time_scale: float = 1.0,
    growing_fraction: float = 0.0,
    gpu_memory_bytes: int = 80 << 30,
    own: dict[int, int] | None = None,
    jump_fraction: float = 0.0,
) -> list[SimJobSpec]:
    """Give each trace job a profile (and maybe growth); cut to ``jobs``, scale arrivals.

    ``own``: trace index -> profile index of the jobs with their own GPU figures (their
    measured peak is their memory: they do not grow). A job that asked for a share of one
    GPU (``TraceJob.share``) has its memory capped to that share of ``gpu_memory_bytes``
    (other jobs to 90 % of it). ``jump_fraction``: the share of growing jobs whose memory
    jumps in one step (at 20-80 % of their work) instead of rising linearly; 0 draws nothing
    more, so the other jobs' draws stay as they were."""
    if not 0.0 <= jump_fraction <= 1.0:
        raise WorkloadError(f"--jump-fraction is a share in [0, 1], not {jump_fraction}")
    if not 0.0 <= growing_fraction <= 1.0:
        raise WorkloadError(f"--growing-fraction is a share in [0, 1], not {growing_fraction}")
    own = own or {}
    if not 0 < time_scale <= MAX_TIME_SCALE:  # NaN and inf too: they would be every result
        raise WorkloadError(f"--time-scale must be above 0 and at most {MAX_TIME_SCALE:g} "
                            f"(0.5 halves the gaps between arrivals), not {time_scale}")
    rng = random.Random(seed)
    cut = trace[:jobs] if jobs else trace
    out = []
    for i, t in enumerate(cut):
        # a share of one GPU (gres/gpu=0.5) fits its memory in that share
        cap = int(0.9 * gpu_memory_bytes) if t.share is None else int(t.share * gpu_memory_bytes)
        if i in own:
            prof = own[i]
            mem0 = min(profiles[prof].mem_bytes, cap)
            out.append(SimJobSpec(i, t.submit * time_scale, t.duration, t.gpus, prof, mem0, mem0,
                                  own=True))
            continue
        if t.workload:
            h = hashlib.sha256(f"{seed}:{t.workload}".encode()).digest()
            prof = int.from_bytes(h[:4], "big") % len(profiles)
        else:
            prof = rng.randrange(len(profiles))
        mem0 = min(profiles[prof].mem_bytes, cap)
        mem1 = mem0
        jump_at = None
        if t.gpus == 1 and growing_fraction > 0 and rng.random() < growing_fraction:
            mem1 = min(cap, int(mem0 * round(rng.uniform(1.5, 3.0) * 4) / 4))  # quantised: replays share forecasts
            if jump_fraction > 0 and rng.random() < jump_fraction:
                jump_at = round(rng.uniform(0.2, 0.8), 2)
        out.append(SimJobSpec(i, t.submit * time_scale, t.duration, t.gpus, prof, mem0, mem1, jump_at=jump_at))
    return out


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)
