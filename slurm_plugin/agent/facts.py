"""What a node agent tells the helper it must agree with (:mod:`slurm_plugin.helper.agreement`).

- the suite's version and the link's protocol version;
- the node's GPUs, as the backend sees them (catalogue model, device name, memory);
- the node's ``gres.conf`` as Slurm on this node reads it: the GPUs' ``Type=`` and the shard
  count of each GPU (``Name=shard Count=N`` over its ``File=`` devices);
- the shares per GPU the agent was told to place (``--shares-per-gpu``; None when it was not:
  then it follows the GPU model's own, which gres.conf's count is checked against).

The agent answers them to the link's ``hello`` op; every ``samples`` answer carries a short
digest of them (:meth:`NodeFacts.digest`: the agent's start, the suite version and gres.conf's
modification), so the helper asks again when the agent restarted or gres.conf changed.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from slurm_plugin.slurm.gres import expand_hostlist

log = logging.getLogger(__name__)

#: The link's protocol: the ops of :mod:`.ops` and the shape of their answers. Raised when
#: either changes in a way an older helper or agent would misread.
LINK_PROTOCOL = 1
#: Where Slurm keeps the configuration it fetched in configless mode (slurmd >= 21.08).
CONFIGLESS_DIR = Path("/run/slurm/conf")


def suite_version() -> str:
    """The installed suite's version (the package's metadata)."""
    try:
        return importlib.metadata.version("slurm-gpu-packer")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class NodeGres:
    """The lines of gres.conf that apply to one node."""

    path: str
    gpu_types: tuple[str, ...] = ()  # Type= of its gpu lines ("" for a line without one)
    shards_per_gpu: tuple[int, ...] = ()  # each distinct shard count of one GPU
    error: str | None = None  # why the file could not be read (nothing else is then set)


def gres_conf_path(slurm_conf: Path | None = None) -> Path:
    """gres.conf beside slurm.conf (SLURM_CONF), else where configless slurmd keeps it."""
    from slurm_plugin.metrics.ports import slurm_conf_path

    beside = slurm_conf_path(slurm_conf).parent / "gres.conf"
    if beside.exists() or not (CONFIGLESS_DIR / "gres.conf").exists():
        return beside
    return CONFIGLESS_DIR / "gres.conf"


def _pairs(line: str) -> dict[str, str]:
    return {k.lower(): v for k, _, v in (w.partition("=") for w in line.split()) if v}


def node_gres(text: str, node: str, path: str = "gres.conf") -> NodeGres:
    """The gpu types and per-GPU shard counts gres.conf gives ``node`` (lines with its name in
    ``NodeName=``, or with no NodeName). A shard line's Count is spread evenly over its File
    devices (Slurm's rule); a line whose Count does not divide evenly is reported as an error."""
    types: set[str] = set()
    shards: set[int] = set()
    for raw in text.splitlines():
        pairs = _pairs(raw.split("#", 1)[0])
        name = pairs.get("name", "").lower()
        if name not in ("gpu", "shard") or ("nodename" in pairs and node not in expand_hostlist(pairs["nodename"])):
            continue
        if name == "gpu":
            types.add(pairs.get("type", ""))
            continue
        try:
            count = int(pairs.get("count", "0"))
        except ValueError:
            return NodeGres(path, error=f"shard Count={pairs.get('count')!r} is not a number")
        files = len(expand_hostlist(pairs["file"])) if "file" in pairs else 1
        if count % files:
            return NodeGres(path, error=f"shard Count={count} does not divide over {files} devices")
        shards.add(count // files)
    return NodeGres(path, tuple(sorted(types)), tuple(sorted(shards)))


def read_node_gres(path: Path, node: str) -> NodeGres:
    try:
        text = path.read_text()
    except OSError as exc:
        return NodeGres(str(path), error=f"cannot read it: {exc.strerror or exc}")
    return node_gres(text, node, str(path))


@dataclass(frozen=True)
class GpuFact:
    index: int
    model: str  # catalogue model
    name: str  # the device's own name
    memory_mib: int


@dataclass(frozen=True)
class NodeFacts:
    node: str
    protocol: int
    version: str
    started_at: float
    gpus: tuple[GpuFact, ...]
    shares_per_gpu: int | None  # the agent's --shares-per-gpu (None: the GPU model's own)
    gres: NodeGres

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict) -> "NodeFacts":
        """The facts an agent sent (a KeyError or TypeError: a malformed answer)."""
        return cls(str(doc["node"]), int(doc["protocol"]), str(doc["version"]), float(doc["started_at"]),
                   tuple(GpuFact(**g) for g in doc["gpus"]), _int_or_none(doc["shares_per_gpu"]),
                   NodeGres(**{**doc["gres"], "gpu_types": tuple(doc["gres"].get("gpu_types") or ()),
                               "shards_per_gpu": tuple(doc["gres"].get("shards_per_gpu") or ())}))


def _int_or_none(value: object) -> int | None:
    return None if value is None else int(value)  # a TypeError or ValueError: malformed


class FactsReader:
    """The agent's facts, read when asked; a cheap digest of what would change them."""

    def __init__(self, node: str, backend, shares_per_gpu: int | None, gres_path: Path,
                 started_at: float, version: Callable[[], str] = suite_version):
        self.node = node
        self.backend = backend
        self.shares_per_gpu = shares_per_gpu
        self.gres_path = Path(gres_path)
        self.started_at = started_at
        self.version = version()

    def facts(self) -> NodeFacts:
        gpus = tuple(GpuFact(g.index, g.model, g.name, g.memory_mib) for g in self.backend.list_gpus())
        return NodeFacts(self.node, LINK_PROTOCOL, self.version, self.started_at, gpus, self.shares_per_gpu,
                         read_node_gres(self.gres_path, self.node))

    def digest(self) -> str:
        try:
            st = os.stat(self.gres_path)
            gres = f"{st.st_mtime_ns}:{st.st_size}"
        except OSError:
            gres = "-"
        text = f"{LINK_PROTOCOL}|{self.version}|{self.started_at!r}|{self.shares_per_gpu}|{gres}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]
