"""What the main page shows, assembled from plain data (no I/O here).

Inputs are the Slurm adapter's `Node` and `Job` records, what each node agent says it
isolated (`AgentJob`) and the latest events; the output is an `Overview`: nodes x GPUs
with the slices on each GPU and the job in each, the running and pending jobs with the
packer's decision and reason, and counts that cover every job even when the lists are cut.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from packer import comment as comment_mod
from slurm_plugin.slurm.gres import expand_hostlist, format_gres
from slurm_plugin.slurm.model import Job, Node

ACTIVE = ("RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING")


@dataclass(frozen=True)
class AgentJob:
    """What a node agent isolated for one job: its GPU and `whole | mig:P@S | mps:PCT`."""

    job_id: int
    node: str
    gpu_index: int
    isolation: str


@dataclass(frozen=True)
class Slice:
    """One job's part of a GPU, in share units (a MIG memory slice or a Slurm shard)."""

    job_id: int
    kind: str  # whole | mig | mps | shard
    label: str  # "whole", "1g.10gb", "30%", "shard:2"
    start: float
    size: float
    user: str = ""
    name: str = ""
    placed: bool = True  # the start is the real one (a MIG placement); else drawn where free


@dataclass(frozen=True)
class GpuView:
    node: str
    index: int
    shares: int
    slices: tuple[Slice, ...] = ()

    @property
    def mode(self) -> str:
        """idle, exclusive (one job holds it whole) or packed (jobs share it)."""
        if not self.slices:
            return "idle"
        return "exclusive" if any(s.kind == "whole" for s in self.slices) else "packed"

    @property
    def used(self) -> float:
        return min(float(self.shares), sum(s.size for s in self.slices))


@dataclass(frozen=True)
class NodeView:
    name: str
    state: str
    usable: bool
    gpus: tuple[GpuView, ...]


@dataclass(frozen=True)
class JobRow:
    job_id: int
    name: str
    user: str
    state: str
    decision: str  # packed | exclusive | untouched (what was applied)
    verdict: str | None  # what the packer said (differs in advise mode)
    reason: str | None
    shards: int | None
    gres: str
    nodes: str
    state_reason: str | None
    priority: int | None
    fingerprint: str | None
    restarts: int


@dataclass(frozen=True)
class EventRow:
    at: float
    job_id: int | None
    kind: str
    detail: str


@dataclass(frozen=True)
class Overview:
    taken_at: float
    nodes: tuple[NodeView, ...]
    running: tuple[JobRow, ...]  # cut at max_rows; running_total counts all
    pending: tuple[JobRow, ...]  # queue order (priority, then age); cut at max_rows
    events: tuple[EventRow, ...]
    running_total: int = 0
    pending_total: int = 0
    running_by_decision: Mapping[str, int] = field(default_factory=dict)
    pending_by_reason: tuple[tuple[str, str, int], ...] = ()  # (decision, reason, count)
    problems: tuple[str, ...] = ()  # what could not be read (a node agent down, ...)

    @property
    def gpu_modes(self) -> Counter:
        return Counter(g.mode for n in self.nodes for g in n.gpus)


def why(record: comment_mod.CommentRecord | None) -> str | None:
    """The decision's reason; for a packed job, what its size came from (`est=… src=…`)."""
    if record is None:
        return None
    if record.reason:
        return record.reason
    basis = [f"{k}={record.fields[k]}" for k in ("est", "util", "src") if k in record.fields]
    return " ".join(basis) or None


def job_row(job: Job) -> JobRow:
    record = comment_mod.parse(job.admin_comment)
    return JobRow(
        job_id=job.job_id, name=job.name or "", user=job.user or "", state=job.state or "",
        decision=record.applied_verdict if record else "untouched",
        verdict=record.verdict if record else None,
        reason=why(record),
        shards=record.shards if record else None,
        gres=format_gres(job.gres) if job.gres else "",
        nodes=job.nodes or "", state_reason=job.state_reason,
        priority=job.priority, fingerprint=record.fingerprint if record else None,
        restarts=job.restart_cnt or 0,
    )


def _mig_profile(isolation: str) -> tuple[str, int | None]:
    body = isolation[4:]
    profile, _, start = body.partition("@")
    return profile, int(start) if start.isdigit() else None


def slices_from_slurm(job: Job) -> dict[tuple[str, int], Slice]:
    """(node, GPU index) -> the job's slice there, from Slurm's allocation (`gres_detail`)."""
    out: dict[tuple[str, int], Slice] = {}
    for host, item in zip(expand_hostlist(job.nodes), job.gres_detail):
        if item.name == "gpu" and item.indexes:
            for idx in item.indexes:
                out[(host, idx)] = Slice(job.job_id, "whole", "whole", 0, 0, job.user or "", job.name or "")
        elif item.name == "shard":
            counts: dict[int, int] = {}
            if item.per_device:
                counts = {i: used for i, (used, _t) in enumerate(item.per_device) if used}
            elif item.indexes:
                share, extra = divmod(item.count, len(item.indexes))
                counts = {idx: share + (pos < extra) for pos, idx in enumerate(item.indexes)}
            for idx, n in counts.items():
                out[(host, idx)] = Slice(job.job_id, "shard", f"shard:{n}", 0, n, job.user or "", job.name or "",
                                         placed=False)
    return out


def refine(slurm: Slice | None, agent: AgentJob, job: Job, shares: int,
           profile_slices: Callable[[str], int | None]) -> Slice:
    """The agent's isolation (MIG placement, MPS percentage) over Slurm's count."""
    user, name = job.user or "", job.name or ""
    iso = agent.isolation
    if iso.startswith("mig:"):
        profile, start = _mig_profile(iso)
        size = profile_slices(profile) or (slurm.size if slurm else 1)
        return Slice(agent.job_id, "mig", profile, float(start or 0), float(size), user, name, placed=start is not None)
    if iso.startswith("mps:"):
        pct = iso[4:]
        try:
            size = max(0.0, min(100.0, float(pct))) * shares / 100
        except ValueError:
            size = slurm.size if slurm else 1.0
        return Slice(agent.job_id, "mps", f"{pct}%", 0, size, user, name, placed=False)
    if slurm is not None:
        return slurm
    return Slice(agent.job_id, "whole", "whole", 0, shares, user, name)


def lay_out(slices: Iterable[Slice], shares: int) -> tuple[Slice, ...]:
    """Give every slice a start: MIG placements where they are, the rest in the first gap."""
    fixed = sorted((s for s in slices if s.placed and s.kind != "whole"), key=lambda s: s.start)
    whole = [s for s in slices if s.kind == "whole"]
    floating = [s for s in slices if not s.placed and s.kind != "whole"]
    out = [Slice(s.job_id, s.kind, s.label, 0, shares, s.user, s.name) for s in whole] + fixed
    taken = [(s.start, s.start + s.size) for s in fixed]
    for s in sorted(floating, key=lambda s: s.job_id):
        start = 0.0
        for lo, hi in sorted(taken):
            if start + s.size <= lo + 1e-9:
                break
            start = max(start, hi)
        taken.append((start, start + s.size))
        out.append(Slice(s.job_id, s.kind, s.label, start, s.size, s.user, s.name, placed=False))
    return tuple(out)


def assemble(
    nodes: Iterable[Node],
    jobs: Iterable[Job],
    agent_jobs: Iterable[AgentJob],
    events: Iterable[EventRow],
    *,
    taken_at: float,
    shares_per_gpu: int,
    profile_slices: Callable[[str], int | None] = lambda _p: None,
    max_rows: int = 500,
    problems: Iterable[str] = (),
) -> Overview:
    jobs = list(jobs)
    by_id = {j.job_id: j for j in jobs}
    active = [j for j in jobs if j.state in ACTIVE]
    per_gpu: dict[tuple[str, int], dict[int, Slice]] = {}
    for job in active:
        for key, sl in slices_from_slurm(job).items():
            per_gpu.setdefault(key, {})[job.job_id] = sl
    for a in agent_jobs:
        if a.gpu_index < 0:
            continue
        job = by_id.get(a.job_id)
        if job is None or job.state not in ACTIVE:
            continue  # Slurm (the source of truth) says it is over; the agent cleans up soon
        key = (a.node, a.gpu_index)
        have = per_gpu.setdefault(key, {})
        have[a.job_id] = refine(have.get(a.job_id), a, job, shares_per_gpu, profile_slices)
    node_views = []
    for node in sorted(nodes, key=lambda n: _natural(n.name)):
        gpus = tuple(
            GpuView(node.name, i, shares_per_gpu, lay_out(per_gpu.get((node.name, i), {}).values(), shares_per_gpu))
            for i in range(node.gpus_total)
        )
        state = "+".join(s.upper() for s in node.state) or "UNKNOWN"
        usable = not any(bad in state for bad in ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING"))
        node_views.append(NodeView(node.name, state, usable, gpus))
    running = sorted((job_row(j) for j in active), key=lambda r: (_natural(r.nodes), r.job_id))
    pending_jobs = sorted((j for j in jobs if j.state == "PENDING"),
                          key=lambda j: (-(j.priority or 0), j.submit_time.timestamp() if j.submit_time else 0.0, j.job_id))
    pending = [job_row(j) for j in pending_jobs]
    by_reason = Counter((r.decision, r.reason or r.state_reason or "-") for r in pending)
    return Overview(
        taken_at=taken_at,
        nodes=tuple(node_views),
        running=tuple(running[:max_rows]),
        pending=tuple(pending[:max_rows]),
        events=tuple(events),
        running_total=len(running),
        pending_total=len(pending),
        running_by_decision=dict(Counter(r.decision for r in running)),
        pending_by_reason=tuple((d, r, n) for (d, r), n in sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0]))),
        problems=tuple(problems),
    )


def _natural(name: str) -> tuple:
    """node2 before node10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))
