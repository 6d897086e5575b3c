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
from slurm_plugin.slurm.gres import format_gres
from slurm_plugin.slurm.model import Job, Node
from slurm_plugin.web.slices import AgentJob, IdleInstance, Slice, lay_out, refine, slices_from_slurm

ACTIVE = ("RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING")


@dataclass(frozen=True)
class GpuView:
    node: str
    index: int
    shares: int
    slices: tuple[Slice, ...] = ()

    @property
    def jobs(self) -> tuple[Slice, ...]:
        return tuple(s for s in self.slices if s.job_id is not None)

    @property
    def mode(self) -> str:
        """idle, exclusive (one job holds it whole) or packed (jobs share it)."""
        held = self.jobs
        if not held:
            return "idle"
        return "exclusive" if any(s.kind == "whole" for s in held) else "packed"

    @property
    def used(self) -> float:
        return min(float(self.shares), sum(s.size for s in self.jobs))


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
    idle: Iterable[IdleInstance] = (),
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
    for inst in idle:
        key = (inst.node, inst.gpu_index)
        have = per_gpu.setdefault(key, {})
        if any(s.kind == "whole" for s in have.values()):
            continue
        have[-(inst.start + 1)] = Slice(None, "idle", inst.profile, float(inst.start), float(inst.size))
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
