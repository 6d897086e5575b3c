"""The MIG instances of a node's GPUs, as the node agent manages them: desired state.

Where a job's slice goes (a placement policy, an idle slice a layout made ready, or a
merge/split of idle slices), which idle instances go, what is left when a job ends, and the
layouts that follow the queue are each decided as a GPU's desired layout
(:class:`mig.desired.GpuLayout`), recorded for ``gpupack mig assert``, and reached only
through :func:`mig.apply.apply_layout`, as ``gpupack mig apply`` does. Jobs' instances are
never touched: every instance a job may hold (owned, with memory, in an assignment, or one we
are unsure of) is passed to the apply as held, and a layout that would destroy one is refused
before anything changes.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from mig.apply import ApplyResult, apply_layout
from mig.backend import MigInstance, partition_state_of
from mig.desired import GpuLayout, after_changes
from mig.errors import MigError
from mig.fsm import Placement
from mig.node_layout import LAYOUT_POLICIES, layout_step
from packer.rules import SuiteRules
from slurm_plugin.agent.journal import SliceJournal
from slurm_plugin.agent.mig_desired import DesiredRecord
from slurm_plugin.agent.paths import AgentError
from slurm_plugin.agent.state import Assignment

log = logging.getLogger(__name__)


def _at(inst: MigInstance) -> Placement:
    return Placement(inst.profile, inst.start)


class MigManager:
    """The MIG instances of this node's GPUs; counts every instance created or destroyed."""

    def __init__(self, backend, policy: str, assignments: Callable[[], Iterable[Assignment]],
                 journal: SliceJournal | None = None, shares_per_gpu: int | None = None,
                 rules: SuiteRules | None = None, desired: DesiredRecord | None = None):
        """``rules``: the slice rules (``SuiteRules.mig_profile``/``mig_slice``, the replay's
        too); None: the defaults with ``policy`` as the placement policy. ``shares_per_gpu``:
        None, each GPU model's share ladder (mig.share_ladder). ``desired``: where the desired
        layouts are recorded (None: kept in memory only)."""
        self.backend = backend
        self.policy = policy
        self.shares_per_gpu = shares_per_gpu
        self.rules = rules or SuiteRules(mig_policy=policy)
        self._assignments = assignments
        self.journal = journal
        # slices no journal line accounts for (made by an agent that died before writing
        # it, or by hand): left alone until no unknown job can hold them (see reconcile)
        self.unsure: set[str] = set()
        # the helper's layout policy, as last pushed ("off" until it says otherwise): with a
        # policy, a finished job's slice stays (idle) for the next job of that size
        self.layout_policy = "off"
        self.reconfigurations = 0
        self.desired = desired or DesiredRecord(None, "", time.time)
        self._adopt_layouts()

    def _adopt_layouts(self) -> None:
        """At start the agent has decided nothing new: each GPU's desired layout is the one it
        shows (the first change the agent makes replaces it)."""
        try:
            for g in self.backend.list_gpus():
                found = tuple(_at(i) for i in self.backend.list_instances(g.index)) if g.mig_enabled else ()
                self.desired.set(GpuLayout(g.index, g.mig_enabled, found, "the layout found at agent start"))
        except MigError as exc:
            log.error("cannot read the GPUs' MIG layouts at start (no desired layout recorded): %s", exc)

    # -- the one way to change a GPU's layout -------------------------------------------------
    def reach(self, gpu_index: int, placements: Sequence[Placement], why: str,
              owners: Mapping[Placement, str] | None = None, releasing: int | None = None,
              insts: list[MigInstance] | None = None) -> ApplyResult:
        """Make ``placements`` the GPU's desired layout and apply it (:func:`mig.apply.apply_layout`).

        Every instance that is not idle is held (``releasing``: the GI id of the instance of a
        job that just ended, which is not). A layout that would destroy a held instance, or that
        is not valid, raises MigError and changes nothing (the desired layout stays as it was);
        a step the GPU refuses leaves the new desired layout recorded with its error. ``insts``:
        the GPU's instances as just listed (default: listed here)."""
        insts = self.backend.list_instances(gpu_index) if insts is None else insts
        held = self._not_idle(gpu_index, insts) - {releasing}
        result = apply_layout(self.backend, gpu_index, placements, held=held, owners=owners, current=insts)
        self.reconfigurations += result.done
        self.desired.set(GpuLayout(gpu_index, True, tuple(placements), why, result.error))
        if result.status == "failed":
            log.error("GPU %d: the layout for %s was not reached: %s", gpu_index, why, result.error)
        return result

    def assignments(self) -> list[Assignment]:
        """Every job this agent isolates now (on any GPU)."""
        return list(self._assignments())

    # -- a job's instance -------------------------------------------------------------------
    def slice_for(self, a: Assignment) -> MigInstance:
        """The MIG instance for a job of ``a.shards`` shares on ``a.gpu_index`` (made or taken)."""
        cat = self.backend.catalog(a.gpu_index)
        profile = self.rules.mig_profile(cat, a.shards, self.shares_per_gpu)
        if profile is None:
            raise AgentError(f"no MIG profile of {cat.model} holds {a.shards} shares")
        if not self.backend.mig_mode(a.gpu_index):
            try:
                self.backend.set_mig_mode(a.gpu_index, True)
            except MigError as exc:
                raise AgentError(f"GPU {a.gpu_index} is not in MIG mode and cannot switch: {exc}") from exc
            self.desired.set(GpuLayout(a.gpu_index, True, (), f"MIG on for job {a.job_id}"))
        insts = self.backend.list_instances(a.gpu_index)
        idle = {_at(i): i for i in self.idle(a.gpu_index, insts)}
        plan = self.rules.mig_slice(partition_state_of(cat, insts), profile.name, tuple(idle))
        if plan.reuse:  # a slice the layout prepared for this size: no reconfiguration
            inst = idle[Placement(plan.profile, plan.start)]
            if hasattr(self.backend, "set_owner"):
                self.backend.set_owner(a.gpu_index, inst.gi_id, a.owner)
            a.notes.append(f"took the idle {inst.profile}@{inst.start} the layout had ready")
            return inst
        if not plan.feasible:
            held = ", ".join(f"{i.profile}@{i.start}(job {i.owner})" for i in insts) or "none"
            raise AgentError(f"no room for {profile.name} on GPU {a.gpu_index} (instances: {held})")
        mine = Placement(profile.name, plan.start)
        want = after_changes(map(_at, insts), plan.destroy, [mine])
        try:
            result = self.reach(a.gpu_index, want, f"job {a.job_id}'s {mine}", owners={mine: a.owner}, insts=insts)
        except MigError as exc:
            raise AgentError(f"no room for {profile.name} on GPU {a.gpu_index}: {exc}") from exc
        if result.status == "failed":
            raise AgentError(f"GPU {a.gpu_index}: job {a.job_id}'s {mine} was not made: {result.error}")
        return made_or_idle(self.backend, result, mine, a.owner,
                            lambda: self.idle(a.gpu_index, self.backend.list_instances(a.gpu_index)))

    def whole_slice(self, a: Assignment, full_profile: str) -> MigInstance:
        """The full-size instance of a MIG-mode GPU for a whole-GPU job; idle slices a layout
        prepared go (MigError when a job holds one, and then nothing changes)."""
        mine = Placement(full_profile, 0)
        insts = self.backend.list_instances(a.gpu_index)
        held = self._not_idle(a.gpu_index, insts)
        result = self.reach(a.gpu_index, (*(_at(i) for i in insts if i.gi_id in held), mine),
                            f"job {a.job_id}'s whole GPU", owners={mine: a.owner}, insts=insts)
        if result.status == "failed":
            raise MigError(result.error or f"{mine} was not made")
        return made_or_idle(self.backend, result, mine, a.owner,
                            lambda: self.idle(a.gpu_index, self.backend.list_instances(a.gpu_index)))

    def leave_mig_mode(self, gpu_index: int) -> None:
        """Switch a GPU out of MIG mode for an MPS share (idle slices go; held ones refuse)."""
        self.destroy_idle(gpu_index)  # slices a layout had prepared
        if self.backend.list_instances(gpu_index):
            raise AgentError(f"GPU {gpu_index} is in MIG mode with instances; an MPS share needs MIG off")
        try:
            self.backend.set_mig_mode(gpu_index, False)
        except MigError as exc:
            raise AgentError(f"GPU {gpu_index} is in MIG mode and cannot leave it: {exc}") from exc
        self.desired.set(GpuLayout(gpu_index, False, (), "MIG off for an MPS share"))

    def release(self, a: Assignment) -> bool:
        """A job ended: its instance is destroyed, or kept idle for the next job of its size
        while a layout policy is on (returns whether it was kept)."""
        if a.kind == "mps" and a.gi_id is not None:  # an MPS-shared instance
            others = [b for b in self._assignments() if b.job_id != a.job_id and b.device_uuid == a.device_uuid]
            if others:  # its other jobs keep it: the owner mark moves to one of them
                if hasattr(self.backend, "set_owner"):
                    self.backend.set_owner(a.gpu_index, a.gi_id, others[0].owner)
                return True
        elif a.kind not in ("mig", "whole") or a.gi_id is None or not a.created_instance:
            return False
        keep = a.kind in ("mig", "mps") and self.layout_policy != "off"  # idle for the next job of its size
        try:
            if hasattr(self.backend, "set_owner"):
                self.backend.set_owner(a.gpu_index, a.gi_id, None)
            if not keep:
                insts = self.backend.list_instances(a.gpu_index)
                mine = [_at(i) for i in insts if i.gi_id == a.gi_id]
                self.reach(a.gpu_index, after_changes(map(_at, insts), mine), f"job {a.job_id} ended",
                           releasing=a.gi_id, insts=insts)
        except MigError as exc:
            log.error("job %d: could not free its %s on GPU %d: %s", a.job_id, a.profile, a.gpu_index, exc)
        return keep

    def drop(self, gpu_index: int, inst: MigInstance, why: str) -> None:
        """Destroy the instance of a job that ended while the agent was down (reconcile);
        MigError when the GPU refuses."""
        if hasattr(self.backend, "set_owner"):
            self.backend.set_owner(gpu_index, inst.gi_id, None)
        insts = self.backend.list_instances(gpu_index)
        result = self.reach(gpu_index, after_changes(map(_at, insts), [_at(inst)]), why,
                            releasing=inst.gi_id, insts=insts)
        if result.status == "failed":
            raise MigError(result.error or f"{_at(inst)} was not destroyed")

    # -- idle instances -----------------------------------------------------------------------
    def _held(self, gpu_index: int) -> tuple[set[int], set[str]]:
        mine = [a for a in self._assignments() if a.gpu_index == gpu_index and a.gi_id is not None]
        return {a.gi_id for a in mine}, {a.device_uuid for a in mine if a.device_uuid}

    def idle(self, gpu_index: int, insts: list[MigInstance] | None = None) -> list[MigInstance]:
        """Instances no job holds: not owned, no process on them, in no assignment of ours,
        and not one we are unsure of. ``insts``: the GPU's instances as just listed."""
        gi_ids, uuids = self._held(gpu_index)
        return [i for i in (self.backend.list_instances(gpu_index) if insts is None else insts)
                if not i.busy and not i.owner and i.gi_id not in gi_ids and i.uuid not in uuids
                and i.uuid not in self.unsure]

    def _not_idle(self, gpu_index: int, insts: list[MigInstance]) -> set[int]:
        """GI ids of the instances a job holds or may hold (every one of ``insts`` not idle)."""
        idle = {i.gi_id for i in self.idle(gpu_index, insts)}
        return {i.gi_id for i in insts if i.gi_id not in idle}

    def destroy_idle(self, gpu_index: int) -> None:
        """Remove every instance no job holds (left by a crash or a layout) to make room."""
        insts = self.backend.list_instances(gpu_index)
        idle = [_at(i) for i in self.idle(gpu_index, insts)]
        if not idle:
            return
        try:
            self.reach(gpu_index, after_changes(map(_at, insts), idle), "to make room", insts=insts)
        except MigError as exc:
            log.warning("GPU %d: could not destroy the idle slices: %s", gpu_index, exc)

    # -- layouts that follow the queue ----------------------------------------------------
    def follow_queue(self, policy: str, mode: str, pending_shards: list[int]) -> list[dict]:
        """Prepare idle MIG slices for the pending jobs (the helper's layout policy).

        Only idle instances are destroyed; returns the changes made, one dict each."""
        if policy not in LAYOUT_POLICIES:
            raise ValueError(f"unknown layout policy {policy!r}; choose one of {', '.join(LAYOUT_POLICIES)}")
        changes: list[dict] = []
        self.layout_policy = policy
        if policy == "off" or mode != "mig" or not pending_shards:
            return changes
        for g in self.backend.list_gpus():
            if g.mig_enabled:
                changes += self._follow_on(g.index, policy, pending_shards)
        return changes

    def _follow_on(self, gpu_index: int, policy: str, pending_shards: list[int]) -> list[dict]:
        """One GPU's desired layout for the queue (:func:`mig.node_layout.layout_step`), reached."""
        cat = self.backend.catalog(gpu_index)
        profiles = [p.name for p in (self.rules.mig_profile(cat, s, self.shares_per_gpu) for s in pending_shards)
                    if p is not None]
        insts = self.backend.list_instances(gpu_index)
        idle = {_at(i) for i in self.idle(gpu_index, insts)}
        state = partition_state_of(cat, insts)
        busy = [p for p in state.placements if p not in idle]
        step = layout_step(state, busy, profiles, policy)
        if not step.changes:
            return []
        try:
            result = self.reach(gpu_index, after_changes(state.placements, step.destroy, step.create), step.reason,
                                insts=insts)
        except MigError as exc:
            log.warning("GPU %d: the layout for the queue (%s) was refused: %s", gpu_index, step.reason, exc)
            return []
        made = [s for s in result.steps if s.status == "done"]
        if self.journal is not None:
            for inst in result.created:
                if inst.uuid:
                    self.journal.idle(inst.uuid)
        changes = [{"gpu": gpu_index, "op": s.action, "profile": s.profile, "start": s.start} for s in made]
        if changes:
            log.info("GPU %d layout (%s): %s", gpu_index, step.reason,
                     ", ".join(f"{c['op']} {c['profile']}@{c['start']}" for c in changes))
        return changes

    def desired_layouts(self) -> dict[str, dict]:
        """Each GPU's desired layout as last decided (what ``gpupack mig assert`` checks the GPU
        against), by GPU index; a GPU the agent decided nothing for is absent."""
        return {str(i): self.desired.gpus[i].to_dict() for i in sorted(self.desired.gpus)}

    def instances(self) -> dict[str, list[dict]]:
        """Every MIG instance on each MIG-mode GPU (idle ones too: laid out for the queue)."""
        out: dict[str, list[dict]] = {}
        try:
            for g in self.backend.list_gpus():
                if g.mig_enabled:
                    out[str(g.index)] = [{"profile": i.profile, "start": i.start, "size": i.size, "owner": i.owner}
                                         for i in self.backend.list_instances(g.index)]
        except MigError as exc:
            log.info("cannot list MIG instances for status: %s", exc)
        return out


def made_or_idle(backend, result: ApplyResult, where: Placement, owner: str,
                 idle_now: Callable[[], list[MigInstance]]) -> MigInstance:
    """The instance at ``where`` for ``owner``: the one the apply made, or an idle one that was
    there already (the layout kept it, e.g. a full-size instance an earlier job left idle);
    never one another job holds. ``idle_now``: the GPU's idle instances, listed only when the
    apply made nothing there."""
    made = result.made(where)
    if made is not None:
        return made
    there = next((i for i in idle_now() if (i.profile, i.start) == (where.profile, where.start)), None)
    if there is None:
        raise AgentError(f"GPU {result.gpu_index}: the layout was reached but no idle {where} is there for this job")
    if hasattr(backend, "set_owner"):
        backend.set_owner(result.gpu_index, there.gi_id, owner)
    return there
