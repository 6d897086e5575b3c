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
numbers is :mod:`slurm_plugin.simulator.knowledge` (by default only what the replay has
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
from datetime import datetime
from pathlib import Path

from packer.pair_knowledge import sharing_label

log = logging.getLogger(__name__)

MIB = 1 << 20


class WorkloadError(ValueError):
    """A trace or data file that cannot be used; the message names the file and the fix."""


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


def default_data_dir() -> Path | None:
    """``$GPUPACK_DATA_DIR``, else ``shared/data/traces`` beside or above the working dir."""
    env = os.environ.get("GPUPACK_DATA_DIR")
    if env:
        return Path(env)
    here = Path.cwd().resolve()
    for base in (here, *here.parents):
        for cand in (base / "shared" / "data" / "traces", base.parent / "shared" / "data" / "traces"):
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


def _pkey(model: str, dataset: str, batch: str, amp: str) -> str:
    return f"{model}/{dataset}/bs{int(float(batch))}/amp{int(float(amp))}"


def load_profiles(data_dir: Path | None = None) -> tuple[list[WorkloadProfile], PairTable]:
    """The measured profiles and the pair table."""
    path = _data_file(data_dir, "workload_profiles.csv")
    profiles: list[WorkloadProfile] = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            profiles.append(WorkloadProfile(
                index=len(profiles),
                key=_pkey(row["model"], row["dataset"], row["batchsize"], row["amp"]),
                mem_bytes=int(float(row["gmem"]) * MIB),
                util_pct=float(row["gpu_util"]),
                throughput=float(row["speed"]),
                label=int(row["label"]),
            ))
    by_key = {p.key: p.index for p in profiles}
    sums: dict[tuple[int, int], list[float]] = {}
    with open(_data_file(data_dir, "colocation_pairs.csv"), newline="") as fh:
        for row in csv.DictReader(fh):
            a = by_key.get(_pkey(row["model1"], row["dataset1"], row["batchsize1"], row["amp1"]))
            b = by_key.get(_pkey(row["model2"], row["dataset2"], row["batchsize2"], row["amp2"]))
            if a is None or b is None:
                continue
            for x, y, s in ((a, b, row["speed1"]), (b, a, row["speed2"])):
                sums.setdefault((x, y), []).append(min(1.0, float(s)))
    measured = {k: sum(v) / len(v) for k, v in sums.items()}
    return profiles, PairTable(profiles, measured, impute=True)


def load_philly(data_dir: Path | None = None, path: Path | None = None) -> list[TraceJob]:
    """Philly jobs, submit times in seconds from the first submission, in submit order."""
    path = path or _data_file(data_dir, "philly_jobs.csv")
    rows = []
    with open(path, newline="") as fh:
        for n, row in enumerate(csv.DictReader(fh), start=2):
            try:
                ts = datetime.strptime(row["timestamp"], "%Y-%m-%d %H:%M:%S").timestamp()
                rows.append((ts, float(row["duration"]), int(row["num_gpus"])))
            except (KeyError, ValueError) as exc:
                raise WorkloadError(f"{path}:{n}: cannot read job ({exc}); expected columns "
                                    f"timestamp,duration,num_gpus") from None
    if not rows:
        raise WorkloadError(f"{path}: no jobs")
    rows.sort()
    t0 = rows[0][0]
    return [TraceJob(ts - t0, max(1.0, d), max(1, g)) for ts, d, g in rows]


def _elapsed(text: str) -> float | None:
    """Slurm's ``[D-]HH:MM:SS`` (or MM:SS) in seconds."""
    text = text.strip()
    if not text or text in ("Unknown", "INVALID"):
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [float(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    h, m, s = parts
    return days * 86400 + h * 3600 + m * 60 + s


def _stamp(text: str) -> float | None:
    text = text.strip()
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    return datetime.fromisoformat(text).timestamp()


def _gpu_count(tres: str) -> int:
    """GPUs in a TRES string: ``gres/gpu=2`` (sum over types, untyped wins) or ``gpu:2``."""
    untyped = typed = 0
    for item in tres.split(","):
        item = item.strip()
        if item.startswith("gres/gpu=") :
            untyped = int(float(item.split("=", 1)[1]))
        elif item.startswith("gres/gpu:") and "=" in item:
            typed += int(float(item.split("=", 1)[1]))
        elif item.startswith("gpu:"):
            tail = item.split(":")[-1].split("(")[0]
            if tail.isdigit():
                untyped = max(untyped, int(tail))
    return untyped or typed


SACCT_HELP = (
    "sacct -P -a -S 2024-01-01 -E now "
    "--format=JobID,User,JobName,Submit,Start,End,Elapsed,AllocTRES,ReqTRES,State,"
    "TRESUsageInMax,TRESUsageInAve > jobs.txt  (TRESUsageIn* carry gres/gpumem and "
    "gres/gpuutil when slurm.conf has AccountingStorageTRES=gres/gpu,gres/gpumem,gres/gpuutil "
    "and an NVML-enabled slurmd; they sit on the steps, so do not pass -X)"
)

_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def _tres_value(tres: str, name: str) -> float | None:
    """``name``'s value in a TRES string (``gres/gpumem=4404M,gres/gpuutil=37``); a K/M/G/T
    suffix is binary (sacct's form), a bare number as it is."""
    for item in tres.split(","):
        key, sep, val = item.strip().partition("=")
        if sep and key == name and val:
            mult = _UNITS.get(val[-1].upper())
            try:
                return float(val[:-1]) * mult if mult else float(val)
            except ValueError:
                return None
    return None


def load_sacct(path: str | Path) -> list[TraceJob]:
    """Jobs from a ``sacct -P`` export (``|``-separated, one header line).

    Needed columns: ``Submit``; ``Elapsed`` or ``Start`` and ``End``; ``AllocTRES`` or
    ``ReqTRES`` (or ``AllocGRES``/``ReqGRES``) carrying the GPU count. Optional: ``User``,
    ``JobName`` (a workload key), ``JobID``, ``TRESUsageInMax`` and ``TRESUsageInAve``. Steps
    (``123.batch``, ``123.0``) are not jobs; their ``gres/gpumem`` (largest over the job and its
    steps, from ``TRESUsageInMax``) and ``gres/gpuutil`` (largest step average, from
    ``TRESUsageInAve``) become the job's own figures. Jobs without GPUs, or that never
    started, are skipped.
    """
    path = Path(path)
    if not path.exists():
        raise WorkloadError(f"{path}: no such file; export one with: {SACCT_HELP}")
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh, delimiter="|")
        cols = set(reader.fieldnames or ())
        tres_cols = [c for c in ("AllocTRES", "ReqTRES", "AllocGRES", "ReqGRES") if c in cols]
        if "Submit" not in cols or not tres_cols or not ("Elapsed" in cols or {"Start", "End"} <= cols):
            raise WorkloadError(
                f"{path}: needs columns Submit, Elapsed (or Start and End) and AllocTRES or "
                f"ReqTRES; found {sorted(cols)}; export with: {SACCT_HELP}")
        rows = []
        mem: dict[str, float] = {}
        util: dict[str, float] = {}
        for n, row in enumerate(reader, start=2):
            jid = (row.get("JobID") or "").strip()
            base = jid.split(".", 1)[0]
            m = _tres_value(row.get("TRESUsageInMax") or "", "gres/gpumem")
            u = _tres_value(row.get("TRESUsageInAve") or "", "gres/gpuutil")
            if m is not None and m > 0:
                mem[base] = max(m, mem.get(base, 0.0))
            if u is not None and u > 0:
                util[base] = max(u, util.get(base, 0.0))
            if "." in jid:
                continue
            try:
                submit = _stamp(row["Submit"])
                dur = _elapsed(row["Elapsed"]) if "Elapsed" in cols else None
                if dur is None and {"Start", "End"} <= cols:
                    s, e = _stamp(row["Start"]), _stamp(row["End"])
                    dur = (e - s) if s is not None and e is not None else None
                gpus = 0
                for c in tres_cols:
                    gpus = _gpu_count(row.get(c) or "")
                    if gpus:
                        break
            except (ValueError, KeyError) as exc:
                raise WorkloadError(f"{path}:{n}: cannot read job ({exc})") from None
            if submit is None or dur is None or dur <= 0 or gpus <= 0:
                continue
            key = f"{row.get('User', '')}/{row.get('JobName', '')}" if (
                "User" in cols or "JobName" in cols) else ""
            rows.append((submit, dur, gpus, key, base))
    if not rows:
        raise WorkloadError(f"{path}: no finished GPU jobs found (need AllocTRES with gres/gpu=N)")
    rows.sort(key=lambda r: r[:4])
    t0 = rows[0][0]
    return [TraceJob(s - t0, d, g, k,
                     int(mem[b]) if b in mem else None, min(100.0, util[b]) if b in util else None)
            for s, d, g, k, b in rows]


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


def build_jobs(
    trace: list[TraceJob],
    profiles: list[WorkloadProfile],
    seed: int = 0,
    jobs: int | None = None,
    time_scale: float = 1.0,
    growing_fraction: float = 0.0,
    gpu_memory_bytes: int = 80 << 30,
    own: dict[int, int] | None = None,
) -> list[SimJobSpec]:
    """Give each trace job a profile (and maybe growth); cut to ``jobs``, scale arrivals.

    ``own``: trace index -> profile index of the jobs with their own GPU figures (their
    measured peak is their memory: they do not grow)."""
    own = own or {}
    if time_scale <= 0:
        raise WorkloadError("--time-scale must be positive (0.5 halves the gaps between arrivals)")
    rng = random.Random(seed)
    cut = trace[:jobs] if jobs else trace
    out = []
    cap = int(0.9 * gpu_memory_bytes)
    for i, t in enumerate(cut):
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
        if t.gpus == 1 and growing_fraction > 0 and rng.random() < growing_fraction:
            mem1 = min(cap, int(mem0 * round(rng.uniform(1.5, 3.0) * 4) / 4))  # quantised: replays share forecasts
        out.append(SimJobSpec(i, t.submit * time_scale, t.duration, t.gpus, prof, mem0, mem1))
    return out


def trace_from_spec(spec: str, data_dir: Path | None = None) -> list[TraceJob]:
    """``philly``, ``sacct:FILE`` or ``philly:FILE`` (a CSV in the Philly layout)."""
    if spec == "philly":
        return load_philly(data_dir)
    kind, sep, rest = spec.partition(":")
    if sep and kind == "sacct" and rest:
        return load_sacct(rest)
    if sep and kind == "philly" and rest:
        return load_philly(path=Path(rest))
    raise WorkloadError(f"unknown trace {spec!r}; use philly, philly:FILE.csv or sacct:FILE")


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)
