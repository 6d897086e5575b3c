"""What the regrouping planner reads: GPUs, running jobs, who may be moved, the head job.

Design note: a job is *movable* only when it said so by Slurm's own conventions or an
administrator did: `--requeue` together with a checkpoint signal (`--signal=B:USR1@T`: the
job checkpoints when signalled and has T seconds to do it), or checkpoint reports (a job
that tells the agent when it last checkpointed and how often it does), or an admin's
partition/QOS setting (`admin`). A move waits for the checkpoint: the signal's grace time,
or the next reported checkpoint boundary; only a job that can do neither (admin-movable,
no reports) loses the work since its start. `Movability.timing` turns this into (wait,
lost work) for a move decided at `now`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import cached_property

from mig.fsm import PartitionState, Placement

GpuKey = tuple[str, int]  # (node, GPU index)

_SIGNAL = re.compile(r"^(?:(?P<flags>[RB]+):)?(?P<sig>[A-Za-z0-9+]+)(?:@(?P<time>\d+))?$")
DEFAULT_SIGNAL_TIME_S = 60  # Slurm's default sig_time when --signal names none


@dataclass(frozen=True)
class SignalSpec:
    """A job's `--signal=[{R|B}:]SIG[@TIME]`."""

    signal: str
    seconds: int
    batch_only: bool = False


def parse_signal(text: str | None) -> SignalSpec | None:
    """Read Slurm's `--signal` value (`B:USR1@120`, `USR1`, `10@30`); None when absent.

    Raises ValueError naming the expected form when the text cannot be read."""
    if text is None or not text.strip():
        return None
    m = _SIGNAL.match(text.strip())
    if m is None:
        raise ValueError(f"cannot read --signal={text!r}: write [{{R|B}}:]SIG[@SECONDS], e.g. B:USR1@120")
    seconds = int(m.group("time")) if m.group("time") is not None else DEFAULT_SIGNAL_TIME_S
    if seconds > 65535:
        raise ValueError(f"--signal={text!r}: Slurm allows at most 65535 seconds")
    sig = m.group("sig").upper()
    if sig.startswith("SIG"):
        sig = sig[3:]
    return SignalSpec(sig, seconds, "B" in (m.group("flags") or ""))


_SBATCH_SIGNAL = re.compile(r"^#SBATCH\s+.*?--signal[=\s]+(?P<value>\S+)")


def script_signal(script: str | None) -> SignalSpec | None:
    """The `--signal` a batch script declares in its `#SBATCH` lines; None when it declares none.

    sbatch reads `#SBATCH` lines until the first command, so a later one does not count.
    Slurm 22.05 to 26.05 print a job's `--signal` nowhere in `squeue`/`scontrol` JSON, so the
    script is where a checkpointing job's convention is read from."""
    found = None
    for line in (script or "").splitlines():
        text = line.strip()
        if not text or (text.startswith("#") and not text.startswith("#SBATCH")):
            continue
        if not text.startswith("#SBATCH"):
            break  # the first command ends sbatch's options
        m = _SBATCH_SIGNAL.match(text)
        if m is not None:
            found = parse_signal(m.group("value").strip("'\""))
    return found


@dataclass(frozen=True)
class Movability:
    """Whether a job may be moved, and how it checkpoints."""

    requeue: bool = False  # Slurm may requeue it (--requeue or the partition's default)
    signal: SignalSpec | None = None  # its checkpoint signal (--signal)
    admin: bool = False  # an admin's partition/QOS setting marks its jobs movable
    last_checkpoint_at: float | None = None  # reported by the job
    checkpoint_every_s: float | None = None  # reported checkpoint period

    @property
    def movable(self) -> bool:
        return self.admin or (self.requeue and (self.signal is not None or self.checkpoint_every_s is not None))

    @property
    def why_not(self) -> str:
        if self.movable:
            return ""
        if not self.requeue:
            return "may not be requeued (no --requeue, no admin setting)"
        return "no checkpoint signal (--signal=B:USR1@T) nor checkpoint reports"

    def timing(self, now: float, started_at: float) -> tuple[float, float]:
        """(wait before the requeue, work lost) for a move decided at `now`.

        Signal: wait its grace time, nothing lost. Periodic reports: wait for the next
        boundary, nothing lost. Neither: requeue now, losing the work since the last
        reported checkpoint, else since the start."""
        if self.signal is not None:
            return float(self.signal.seconds), 0.0
        if self.checkpoint_every_s:
            last = self.last_checkpoint_at if self.last_checkpoint_at is not None else started_at
            period = self.checkpoint_every_s
            nxt = last + period * max(1, math.ceil((now - last) / period))
            if nxt < now:
                nxt += period
            return max(0.0, nxt - now), 0.0
        last = self.last_checkpoint_at if self.last_checkpoint_at is not None else started_at
        return 0.0, max(0.0, now - last)


@dataclass(frozen=True)
class Holding:
    """What a job holds on one GPU: the whole GPU, shares of it, or a MIG instance."""

    node: str
    index: int
    shares: int | None = None  # None: the whole GPU (or a MIG instance, see `placement`)
    placement: Placement | None = None

    @property
    def gpu(self) -> GpuKey:
        return (self.node, self.index)

    @property
    def whole(self) -> bool:
        return self.shares is None and self.placement is None


@dataclass(frozen=True)
class RunningJob:
    """A running job, as the regrouping planner sees it."""

    job_id: int
    holdings: tuple[Holding, ...]
    started_at: float
    remaining_s: float  # predicted time to its end at its present speed
    move: Movability = field(default_factory=Movability)
    speed: float = 1.0  # predicted speed relative to alone here (pair speed when packed)
    restart_s: float = 60.0  # time to come back from its checkpoint
    priority: int = 0
    workload: str = ""  # fingerprint, for pair speeds
    util_pct: float | None = None

    @property
    def gpus(self) -> tuple[GpuKey, ...]:
        return tuple(dict.fromkeys(h.gpu for h in self.holdings))

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(h.node for h in self.holdings))

    @property
    def packed(self) -> bool:
        return any(h.shares is not None for h in self.holdings)

    @property
    def on_mig(self) -> bool:
        return any(h.placement is not None for h in self.holdings)


@dataclass(frozen=True)
class GpuInfo:
    """One GPU: where it is, how many shares it has, its MIG layout when partitioned."""

    node: str
    index: int
    shares: int = 8
    mig: PartitionState | None = None

    @property
    def key(self) -> GpuKey:
        return (self.node, self.index)


@dataclass(frozen=True)
class HeadJob:
    """The job at the head of the queue that regrouping would start sooner.

    Whole GPUs (`gpus`, on at most `max_nodes` nodes; None: as few as fit), or one MIG
    instance of `mig_profile`. `expected_start`: when the scheduler expects to start it
    without regrouping (Slurm's `squeue --start`, the simulator's reservation); None: the
    planner estimates it from the running jobs' remaining times."""

    job_id: int
    gpus: int = 1
    max_nodes: int | None = None
    mig_profile: str | None = None
    expected_start: float | None = None
    submitted_at: float = 0.0


@dataclass(frozen=True)
class Cluster:
    """GPUs and the jobs running on them."""

    gpus: tuple[GpuInfo, ...]
    jobs: tuple[RunningJob, ...]
    max_jobs_per_gpu: int = 2
    max_packed_shares: int = 7

    @cached_property
    def _by_key(self) -> dict[GpuKey, GpuInfo]:
        return {g.key: g for g in self.gpus}

    @cached_property
    def _jobs_on(self) -> dict[GpuKey, tuple[RunningJob, ...]]:
        out: dict[GpuKey, list[RunningJob]] = {}
        for j in self.jobs:
            for key in j.gpus:
                out.setdefault(key, []).append(j)
        return {k: tuple(v) for k, v in out.items()}

    def gpu(self, key: GpuKey) -> GpuInfo:
        g = self._by_key.get(key)
        if g is None:
            raise KeyError(f"GPU {key[0]}:{key[1]} is not in the cluster view")
        return g

    def jobs_on(self, key: GpuKey) -> list[RunningJob]:
        return list(self._jobs_on.get(key, ()))

    def node_names(self) -> list[str]:
        return list(dict.fromkeys(g.node for g in self.gpus))

    def gpus_per_node(self) -> dict[str, list[GpuInfo]]:
        out: dict[str, list[GpuInfo]] = {}
        for g in self.gpus:
            out.setdefault(g.node, []).append(g)
        return out
