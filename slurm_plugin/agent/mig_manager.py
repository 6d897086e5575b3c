"""The MIG instances of a node's GPUs, as the node agent manages them.

Where a job's slice goes (a placement policy, an idle slice a layout made ready, or a
merge/split of idle slices), which idle instances go, what is left when a job ends, and
the layouts that follow the queue. Jobs' instances are never touched here: only the
instances no job holds (no owner, no memory, in no assignment) are destroyed.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

from mig.backend import MigInstance
from mig.errors import MigError
from mig.fsm import Placement
from mig.node_layout import LAYOUT_POLICIES, layout_step
from packer.rules import SuiteRules
from slurm_plugin.agent.journal import SliceJournal
from slurm_plugin.agent.paths import AgentError
from slurm_plugin.agent.state import Assignment

log = logging.getLogger(__name__)


class MigManager:
    """The MIG instances of this node's GPUs; counts every instance created or destroyed."""

    def __init__(self, backend, policy: str, assignments: Callable[[], Iterable[Assignment]],
                 journal: SliceJournal | None = None, shares_per_gpu: int | None = None,
                 rules: SuiteRules | None = None):
        """``rules``: the slice rules (``SuiteRules.mig_profile``/``mig_slice``, the replay's
        too); None: the defaults with ``policy`` as the placement policy. ``shares_per_gpu``:
        None, each GPU model's share ladder (mig.share_ladder)."""
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
        idle = {Placement(i.profile, i.start): i for i in self.idle(a.gpu_index)}
        plan = self.rules.mig_slice(self.backend.partition_state(a.gpu_index), profile.name, tuple(idle))
        if plan.reuse:  # a slice the layout prepared for this size: no reconfiguration
            inst = idle[Placement(plan.profile, plan.start)]
            if hasattr(self.backend, "set_owner"):
                self.backend.set_owner(a.gpu_index, inst.gi_id, a.owner)
            a.notes.append(f"took the idle {inst.profile}@{inst.start} the layout had ready")
            return inst
        if plan.feasible and not all(self.destroy(a.gpu_index, idle[p], f"merge/split for {profile.name}")
                                     for p in plan.destroy):
            plan = replace(plan, start=None)
        if not plan.feasible:
            held = ", ".join(f"{i.profile}@{i.start}(job {i.owner})" for i in self.backend.list_instances(a.gpu_index))
            raise AgentError(f"no room for {profile.name} on GPU {a.gpu_index} (instances: {held or 'none'})")
        inst = self.backend.create_instance(a.gpu_index, profile.name, plan.start, owner=a.owner)
        self.reconfigurations += 1
        return inst

    def leave_mig_mode(self, gpu_index: int) -> None:
        """Switch a GPU out of MIG mode for an MPS share (idle slices go; held ones refuse)."""
        self.destroy_idle(gpu_index)  # slices a layout had prepared
        if self.backend.list_instances(gpu_index):
            raise AgentError(f"GPU {gpu_index} is in MIG mode with instances; an MPS share needs MIG off")
        try:
            self.backend.set_mig_mode(gpu_index, False)
        except MigError as exc:
            raise AgentError(f"GPU {gpu_index} is in MIG mode and cannot leave it: {exc}") from exc

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
                self.backend.destroy_instance(a.gpu_index, a.gi_id)
                self.reconfigurations += 1
        except MigError as exc:
            log.error("job %d: could not free its %s on GPU %d: %s", a.job_id, a.profile, a.gpu_index, exc)
        return keep

    # -- idle instances -----------------------------------------------------------------------
    def _held(self, gpu_index: int) -> tuple[set[int], set[str]]:
        mine = [a for a in self._assignments() if a.gpu_index == gpu_index and a.gi_id is not None]
        return {a.gi_id for a in mine}, {a.device_uuid for a in mine if a.device_uuid}

    def idle(self, gpu_index: int) -> list[MigInstance]:
        """Instances no job holds: not owned, no process on them, in no assignment of ours,
        and not one we are unsure of."""
        gi_ids, uuids = self._held(gpu_index)
        return [i for i in self.backend.list_instances(gpu_index)
                if not i.busy and not i.owner and i.gi_id not in gi_ids and i.uuid not in uuids
                and i.uuid not in self.unsure]

    def destroy(self, gpu_index: int, inst: MigInstance, why: str) -> bool:
        try:
            self.backend.destroy_instance(gpu_index, inst.gi_id)
        except MigError as exc:
            log.warning("GPU %d: could not destroy idle %s@%s: %s", gpu_index, inst.profile, inst.start, exc)
            return False
        self.reconfigurations += 1
        log.info("GPU %d: destroyed idle %s@%s (%s)", gpu_index, inst.profile, inst.start, why)
        return True

    def destroy_idle(self, gpu_index: int) -> None:
        """Remove every instance no job holds (left by a crash or a layout) to make room."""
        for inst in self.idle(gpu_index):
            self.destroy(gpu_index, inst, "to make room")

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
        cat = self.backend.catalog(gpu_index)
        profiles = [p.name for p in (self.rules.mig_profile(cat, s, self.shares_per_gpu) for s in pending_shards)
                    if p is not None]
        idle = {(i.profile, i.start): i for i in self.idle(gpu_index)}
        state = self.backend.partition_state(gpu_index)
        busy = [p for p in state.placements if (p.profile, p.start) not in idle]
        step = layout_step(state, busy, profiles, policy)
        changes: list[dict] = []
        for p in step.destroy:
            inst = idle.get((p.profile, p.start))
            if inst is None or not self.destroy(gpu_index, inst, step.reason):
                return changes
            changes.append({"gpu": gpu_index, "op": "destroy", "profile": p.profile, "start": p.start})
        for p in step.create:
            try:
                made = self.backend.create_instance(gpu_index, p.profile, p.start, owner=None)
            except MigError as exc:
                log.warning("GPU %d: could not create %s@%s for the queue: %s", gpu_index, p.profile, p.start, exc)
                break
            self.reconfigurations += 1
            if self.journal is not None:
                self.journal.idle(made.uuid)
            changes.append({"gpu": gpu_index, "op": "create", "profile": p.profile, "start": p.start})
        if changes:
            log.info("GPU %d layout (%s): %s", gpu_index, step.reason,
                     ", ".join(f"{c['op']} {c['profile']}@{c['start']}" for c in changes))
        return changes

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
