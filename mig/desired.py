"""Desired MIG state of a node's GPUs, and whether what a GPU shows now matches it.

The node agent decides each GPU's layout (the slices its jobs hold, and the idle slices the
queue's layout policy wants ready) and records it here as a :class:`GpuLayout`; it reaches
that layout only through :mod:`mig.apply`. ``gpupack mig assert`` reads the record back and
compares it with the GPU (:func:`compare`): desired state that can be asserted, as
mig-parted's ``assert`` does, without changing anything.

Pure code: the record is a dict (JSON on disk is the adapter's); a record that cannot be
read is refused with a ValueError that names the field, never guessed.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mig.fsm import Placement, parse_placements

DESIRED_VERSION = 1

# the verdict of an assert, as exit statuses
MATCH, DIFFERS, UNKNOWN = 0, 1, 2


@dataclass(frozen=True)
class GpuLayout:
    """One GPU's desired state: MIG mode and its instances; ``error``: why the last apply
    did not reach it (None when it did, or nothing was applied yet)."""

    gpu_index: int
    mig_enabled: bool
    placements: tuple[Placement, ...] = ()
    reason: str = ""
    error: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "placements", tuple(sorted(set(self.placements))))
        if self.placements and not self.mig_enabled:
            raise ValueError(f"GPU {self.gpu_index}: a layout with MIG off cannot hold instances")

    def to_dict(self) -> dict:
        return {"gpu_index": self.gpu_index, "mig_enabled": self.mig_enabled,
                "placements": [str(p) for p in self.placements], "reason": self.reason,
                "error": self.error}

    @classmethod
    def from_dict(cls, data: Mapping) -> "GpuLayout":
        if not isinstance(data, Mapping):
            raise ValueError(f"a GPU's desired layout must be an object, got {type(data).__name__}")
        index, mig, placements = data.get("gpu_index"), data.get("mig_enabled"), data.get("placements")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ValueError(f"desired layout: gpu_index must be a GPU index, got {index!r}")
        if not isinstance(mig, bool):
            raise ValueError(f"GPU {index}: mig_enabled must be true or false, got {mig!r}")
        if not isinstance(placements, list) or not all(isinstance(p, str) for p in placements):
            raise ValueError(f"GPU {index}: placements must be a list of PROFILE@START, got {placements!r}")
        error = data.get("error")
        if error is not None and not isinstance(error, str):
            raise ValueError(f"GPU {index}: error must be text or null, got {error!r}")
        return cls(index, mig, tuple(parse_placements(",".join(placements))),
                   str(data.get("reason", "")), error)


@dataclass(frozen=True)
class NodeDesired:
    """Every GPU's desired layout on one node, as its agent last decided."""

    node: str
    gpus: Mapping[int, GpuLayout] = field(default_factory=dict)
    written_at: float = 0.0

    def to_dict(self) -> dict:
        return {"version": DESIRED_VERSION, "node": self.node, "written_at": self.written_at,
                "gpus": [self.gpus[i].to_dict() for i in sorted(self.gpus)]}

    @classmethod
    def from_dict(cls, data: Mapping) -> "NodeDesired":
        if not isinstance(data, Mapping):
            raise ValueError("the desired MIG state must be a JSON object")
        if data.get("version") != DESIRED_VERSION:
            raise ValueError(f"desired MIG state version {data.get('version')!r}; this gpupack reads "
                             f"version {DESIRED_VERSION}")
        node, gpus = data.get("node"), data.get("gpus")
        if not isinstance(node, str) or not node:
            raise ValueError(f"desired MIG state: node must be a name, got {node!r}")
        if not isinstance(gpus, list):
            raise ValueError(f"desired MIG state of {node}: gpus must be a list, got {gpus!r}")
        layouts = [GpuLayout.from_dict(g) for g in gpus]
        by_index = {g.gpu_index: g for g in layouts}
        if len(by_index) != len(layouts):
            raise ValueError(f"desired MIG state of {node}: a GPU index appears twice")
        at = data.get("written_at", 0.0)
        if not isinstance(at, (int, float)) or isinstance(at, bool):
            raise ValueError(f"desired MIG state of {node}: written_at must be a time, got {at!r}")
        return cls(node, by_index, float(at))


def after_changes(current: Iterable[Placement], destroy: Iterable[Placement] = (),
                  create: Iterable[Placement] = ()) -> tuple[Placement, ...]:
    """The layout ``current`` becomes once ``destroy`` go and ``create`` come."""
    gone = set(destroy)
    return tuple(sorted({p for p in current if p not in gone} | set(create)))


@dataclass(frozen=True)
class GpuDiff:
    """One GPU: its desired layout (None: none recorded), what it shows now (None: could not
    be read, ``problem`` says why), and the placements missing or extra."""

    gpu_index: int
    desired: GpuLayout | None
    actual_mig: bool | None
    actual: tuple[Placement, ...] = ()
    problem: str | None = None

    @property
    def missing(self) -> tuple[Placement, ...]:
        return tuple(p for p in self.desired.placements if p not in self.actual) if self.desired else ()

    @property
    def extra(self) -> tuple[Placement, ...]:
        return tuple(p for p in self.actual if p not in self.desired.placements) if self.desired else ()

    @property
    def verdict(self) -> int:
        if self.desired is None or self.actual_mig is None:
            return UNKNOWN
        if self.desired.mig_enabled != self.actual_mig or self.missing or self.extra:
            return DIFFERS
        return MATCH

    @property
    def match(self) -> bool:
        return self.verdict == MATCH

    def describe(self) -> str:
        """One line: what differs, or why it cannot be told."""
        if self.desired is None:
            return f"GPU {self.gpu_index}: no desired layout recorded"
        if self.actual_mig is None:
            return f"GPU {self.gpu_index}: cannot read its instances: {self.problem}"
        if self.verdict == MATCH:
            return f"GPU {self.gpu_index}: matches ({_text(self.desired.placements, self.actual_mig)})"
        parts = []
        if self.desired.mig_enabled != self.actual_mig:
            parts.append(f"MIG {'on' if self.desired.mig_enabled else 'off'} wanted, "
                         f"{'on' if self.actual_mig else 'off'} now")
        if self.missing:
            parts.append("missing " + ",".join(map(str, self.missing)))
        if self.extra:
            parts.append("extra " + ",".join(map(str, self.extra)))
        if self.desired.error:
            parts.append(f"last apply failed: {self.desired.error}")
        return f"GPU {self.gpu_index}: differs: " + "; ".join(parts)

    def to_dict(self) -> dict:
        return {"gpu_index": self.gpu_index, "match": self.match,
                "desired": self.desired.to_dict() if self.desired else None,
                "actual": None if self.actual_mig is None else
                {"mig_enabled": self.actual_mig, "placements": [str(p) for p in self.actual]},
                "missing": [str(p) for p in self.missing], "extra": [str(p) for p in self.extra],
                "problem": self.problem}


def _text(placements: tuple[Placement, ...], mig: bool) -> str:
    if not mig:
        return "MIG off"
    return ",".join(map(str, placements)) or "MIG on, no instances"


def compare(desired: NodeDesired | None, actual: Mapping[int, tuple[bool, Iterable[Placement]] | str]) -> list[GpuDiff]:
    """Each GPU's difference. ``actual``: per GPU index, (MIG on, its placements), or the
    text of the error that kept it from being read. A GPU in only one of the two is unknown."""
    wanted = desired.gpus if desired is not None else {}
    out = []
    for index in sorted(set(wanted) | set(actual)):
        seen = actual.get(index)
        layout = wanted.get(index)
        if seen is None:
            out.append(GpuDiff(index, layout, None, problem="the GPU is not there"))
        elif isinstance(seen, str):
            out.append(GpuDiff(index, layout, None, problem=seen))
        else:
            mig, placements = seen
            out.append(GpuDiff(index, layout, mig, tuple(sorted(placements))))
    return out


def verdict(diffs: Iterable[GpuDiff]) -> int:
    """The node's verdict: DIFFERS when a GPU differs, else UNKNOWN when one cannot be told
    (or there is no GPU at all), else MATCH."""
    verdicts = [d.verdict for d in diffs]
    if DIFFERS in verdicts:
        return DIFFERS
    return UNKNOWN if not verdicts or UNKNOWN in verdicts else MATCH
