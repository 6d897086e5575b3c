"""One GPU's parts: each job's slice (a MIG instance at its placement, an MPS percentage, a
count of Slurm shards, or the whole GPU), from Slurm's allocation and the node agent's word,
laid out on the GPU's share slots. No I/O here."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from slurm_plugin.slurm.gres import expand_hostlist
from slurm_plugin.slurm.model import Job


@dataclass(frozen=True)
class AgentJob:
    """What a node agent isolated for one job: its GPU and `whole | mig:P@S | mps:PCT`."""

    job_id: int
    node: str
    gpu_index: int
    isolation: str


@dataclass(frozen=True)
class IdleInstance:
    """A MIG instance no job holds (the agent lays idle slices out ahead of the queue)."""

    node: str
    gpu_index: int
    profile: str
    start: int
    size: int


@dataclass(frozen=True)
class Slice:
    """One job's part of a GPU, in share units (a MIG memory slice or a Slurm shard), or an
    idle MIG instance (kind "idle", no job)."""

    job_id: int | None
    kind: str  # whole | mig | mps | shard | idle
    label: str  # "whole", "1g.10gb", "30%", "shard:2"
    start: float
    size: float
    user: str = ""
    name: str = ""
    placed: bool = True  # the start is the real one (a MIG placement); else drawn where free


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
    for s in sorted(floating, key=lambda s: s.job_id or 0):
        start = 0.0
        for lo, hi in sorted(taken):
            if start + s.size <= lo + 1e-9:
                break
            start = max(start, hi)
        taken.append((start, start + s.size))
        out.append(Slice(s.job_id, s.kind, s.label, start, s.size, s.user, s.name, placed=False))
    return tuple(out)
