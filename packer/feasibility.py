"""Whether a job can still start after a run-time action changes it: never strand a job.

A requeue at the head of the queue may add nodes to the job's excluded list (contention, the
gpu+shard guard, grow, regroup) and may change its GRES (a restart on a larger size). Slurm
accepts either change even when it leaves the job nowhere to run, and the job then waits for
good (seen: a job pinned with `-w` to the node a contention requeue excluded stayed PENDING
with BadConstraints). `stranded_by` says why a change would do that, from what Slurm says of
the job and the cluster: the nodes it requires (`-w`), its partitions, node features
(`--constraint`), reservation, licences and its QOS limits. Pure: the facts come in.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeFacts:
    name: str
    partitions: frozenset[str] = frozenset()
    features: frozenset[str] = frozenset()  # active features


@dataclass(frozen=True)
class JobFacts:
    """What constrains where a job may run (from `squeue --json`)."""

    job_id: int
    partitions: tuple[str, ...] = ()  # "a,b": any of them
    required_nodes: frozenset[str] = frozenset()  # -w
    excluded_nodes: frozenset[str] = frozenset()  # -x and what the suite added before
    features: str = ""  # --constraint, e.g. "a100&ib" or "[rack1|rack2]"
    reservation: str = ""
    licenses: Mapping[str, int] = field(default_factory=dict)
    qos: str = ""


@dataclass(frozen=True)
class ClusterFacts:
    """What the cluster offers; a mapping left empty is not checked (not known)."""

    nodes: tuple[NodeFacts, ...] = ()
    reservation_nodes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    license_totals: Mapping[str, int] = field(default_factory=dict)
    # QOS -> TRES -> most per job, e.g. {"normal": {"gres/shard": 4}} (sacctmgr MaxTRESPerJob / PerNode)
    qos_max_tres: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


def features_match(expression: str, features: frozenset[str]) -> bool:
    """Whether a node with `features` satisfies a `--constraint` expression: `|` between
    alternatives, `&` (or `,`) inside one; brackets, parentheses and `*N` counts are read as
    the plain expression (a node-count constraint never excludes every node by itself)."""
    text = re.sub(r"\*\d+", "", expression.replace("[", "").replace("]", "").replace("(", "").replace(")", ""))
    if not text.strip():
        return True
    for alternative in text.split("|"):
        wanted = {f.strip() for f in re.split(r"[&,]", alternative) if f.strip()}
        if wanted <= features:
            return True
    return False


def parse_licenses(text: str | None) -> dict[str, int]:
    """`matlab:2,foo` or `matlab*2` (squeue's `licenses`) as {name: count}."""
    out: dict[str, int] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        found = re.fullmatch(r"([^:*]+)(?:[:*](\d+))?", item)
        if found is None:
            raise ValueError(f"licence request {item!r} is not NAME, NAME:COUNT or NAME*COUNT")
        name, count = found.group(1), int(found.group(2) or 1)
        out[name] = out.get(name, 0) + count
    return out


def gres_tres(gres: str) -> tuple[str, int] | None:
    """`shard:3`, `gpu:h100:1`, `gres/shard:3` as ("gres/shard", 3); None when unreadable."""
    text = gres.split(",")[0].strip().removeprefix("gres/").removeprefix("gres:")
    parts = text.split(":")
    if not parts[0] or not parts[-1].isdigit():
        return None
    return f"gres/{parts[0]}", int(parts[-1])


def stranded_by(job: JobFacts, cluster: ClusterFacts, *, exclude: frozenset[str] = frozenset(),
                gres: str | None = None) -> str | None:
    """Why `job`, with `exclude` added to its excluded nodes and its GRES set to `gres`, could
    never start; None when some node can still take it."""
    pinned = job.required_nodes & exclude
    if pinned:
        return (f"job {job.job_id} is pinned to {','.join(sorted(job.required_nodes))} (-w): excluding "
                f"{','.join(sorted(pinned))} would leave it nowhere to run")
    if cluster.nodes and (exclude or gres is not None):
        reason = _no_node_left(job, cluster, job.excluded_nodes | exclude)
        if reason:
            return reason
    for name, count in job.licenses.items():
        total = cluster.license_totals.get(name)
        if cluster.license_totals and (total is None or total < count):
            return f"job {job.job_id} needs {count} of licence {name}, the cluster has {total or 0}"
    if gres is not None and job.qos:
        wanted = gres_tres(gres)
        limit = cluster.qos_max_tres.get(job.qos, {}).get(wanted[0]) if wanted else None
        if wanted and limit is not None and wanted[1] > limit:
            return (f"job {job.job_id}'s QOS {job.qos} allows at most {limit} {wanted[0]}: "
                    f"{gres} would never start")
    return None


def _no_node_left(job: JobFacts, cluster: ClusterFacts, excluded: frozenset[str]) -> str | None:
    """Which constraint leaves no node, in the order Slurm applies them (None: a node is left)."""
    nodes = [n for n in cluster.nodes if n.name not in excluded]
    if job.required_nodes:
        nodes = [n for n in nodes if n.name in job.required_nodes]
    steps = [
        ("not excluded", lambda n: True),
        (f"in partition {','.join(job.partitions)}",
         lambda n: not job.partitions or bool(n.partitions & set(job.partitions))),
        (f"in reservation {job.reservation}",
         lambda n: not job.reservation or job.reservation not in cluster.reservation_nodes
         or n.name in cluster.reservation_nodes[job.reservation]),
        (f"with features {job.features}", lambda n: not job.features or features_match(job.features, n.features)),
    ]
    for label, keep in steps:
        nodes = [n for n in nodes if keep(n)]
        if not nodes:
            return (f"job {job.job_id} would have no node {label} once "
                    f"{','.join(sorted(excluded)) or 'nothing'} is excluded")
    return None
