"""Apply a desired MIG layout to one GPU through any backend.

Desired state (a list of placements), current state (the backend's instances) and the
apply are separate: :func:`plan_apply` computes the steps, :func:`apply_layout` runs them
in order and records each step's status (``pending``, ``done``, ``failed``, ``skipped``)
instead of stopping silently. Busy instances are never destroyed: a layout that would need
it is refused before anything changes. A caller that knows more than the backend of what is
in use (the node agent: instances its jobs hold, slices it is unsure of) names them ``held``,
and they count as busy. The CLI and the node agent both reach a layout through here.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Collection, Mapping, Sequence

from mig.backend import GpuBackend, MigInstance
from mig.errors import InUseError, MigDisabledError, MigError
from mig.fsm import PartitionState, Placement, get_space

log = logging.getLogger(__name__)


@dataclass
class ApplyStep:
    action: str  # "destroy" | "create"
    profile: str
    start: int
    gi_id: int | None = None
    owner: str | None = None  # the job a created instance is for (None: idle)
    status: str = "pending"
    error: str | None = None

    def __str__(self) -> str:
        return f"{self.action} {self.profile}@{self.start}"


@dataclass
class ApplyResult:
    gpu_index: int
    status: str  # "unchanged" | "planned" | "success" | "failed"
    steps: list[ApplyStep] = field(default_factory=list)
    created: list[MigInstance] = field(default_factory=list)  # the instances the steps made

    def made(self, where: Placement) -> MigInstance | None:
        """The instance a create step made at ``where`` (None: none was made there)."""
        return next((i for i in self.created if (i.profile, i.start) == (where.profile, where.start)), None)

    @property
    def error(self) -> str | None:
        """The failed step's error (None unless the result failed)."""
        return next((f"{s} refused: {s.error}" for s in self.steps if s.status == "failed"), None)

    @property
    def done(self) -> int:
        """Instances created or destroyed."""
        return sum(1 for s in self.steps if s.status == "done")

    def to_dict(self) -> dict:
        return {"gpu_index": self.gpu_index, "status": self.status,
                "steps": [asdict(s) for s in self.steps]}


def plan_apply(backend: GpuBackend, gpu_index: int, desired: Sequence[Placement],
               held: Collection[int] = (), owners: Mapping[Placement, str] | None = None,
               current: Sequence[MigInstance] | None = None) -> list[ApplyStep]:
    """The destroy/create steps that turn the GPU's instances into ``desired``.

    ``held``: GPU instance ids the caller knows in use (busy, as the backend's own busy
    ones); ``owners``: the owner to create a desired placement with (default: idle);
    ``current``: the GPU's instances as the caller has just listed them (default: listed here)."""
    if not backend.mig_mode(gpu_index):
        raise MigDisabledError(
            f"GPU {gpu_index}: MIG mode is off; enable it (`nvidia-smi -i {gpu_index} -mig 1` "
            f"as root) before applying a layout")
    catalog = backend.catalog(gpu_index)
    PartitionState.from_placements(get_space(catalog), desired)  # refuses an invalid layout
    want = set(desired)
    current = backend.list_instances(gpu_index) if current is None else current
    have = {Placement(i.profile, i.start): i for i in current}
    in_the_way = [i for p, i in have.items() if p not in want and (i.busy or i.gi_id in held)]
    if in_the_way:
        names = ", ".join(f"{i.profile}@{i.start} (GI {i.gi_id}, {i.owner or 'in use'})"
                          for i in in_the_way)
        raise InUseError(
            f"GPU {gpu_index}: the layout would destroy busy instances {names}; wait for their "
            f"jobs to end or keep them in the layout")
    steps = [ApplyStep("destroy", p.profile, p.start, i.gi_id)
             for p, i in sorted(have.items()) if p not in want]
    creates = [p for p in want if p not in have]
    creates.sort(key=lambda p: (-catalog.profile(p.profile).memory_slices, p.start, p.profile))
    owners = owners or {}
    steps += [ApplyStep("create", p.profile, p.start, owner=owners.get(p)) for p in creates]
    return steps


def apply_layout(backend: GpuBackend, gpu_index: int, desired: Sequence[Placement],
                 dry_run: bool = False, held: Collection[int] = (),
                 owners: Mapping[Placement, str] | None = None,
                 current: Sequence[MigInstance] | None = None) -> ApplyResult:
    """Plan and (unless ``dry_run``) run the steps; a failure marks the rest skipped.
    ``held``, ``owners``, ``current``: as :func:`plan_apply`."""
    steps = plan_apply(backend, gpu_index, desired, held, owners, current)
    if not steps:
        return ApplyResult(gpu_index, "unchanged", [])
    if dry_run:
        return ApplyResult(gpu_index, "planned", steps)
    result = ApplyResult(gpu_index, "success", steps)
    for n, step in enumerate(steps):
        try:
            if step.action == "destroy":
                backend.destroy_instance(gpu_index, step.gi_id)  # type: ignore[arg-type]
            else:
                made = backend.create_instance(gpu_index, step.profile, step.start, owner=step.owner)
                result.created.append(made)
                step.gi_id = made.gi_id
            step.status = "done"
        except MigError as exc:
            step.status, step.error = "failed", str(exc)
            for later in steps[n + 1:]:
                later.status = "skipped"
            result.status = "failed"
            log.error("GPU %s: %s failed: %s", gpu_index, step, exc)
            break
    return result
