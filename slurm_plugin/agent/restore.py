"""Giving an agent its slices back from the controller's copy of its journal.

An agent that lost both ``state.json`` and its slice journal (a reinstalled node disk, an
emptied state folder) finds MIG slices that nothing on the node accounts for; it leaves them
alone ("unsure", :mod:`.reconcile`). The helper keeps a copy of every node's journal
(:mod:`slurm_plugin.helper.journal_mirror`) and sends the records of those slices. Each is taken only when
everything confirms it:

- the agent is unsure of that slice (a slice it accounts for is never reassigned this way);
- NVML still lists the slice, on the same GPU, with the same profile and placement;
- the job list the helper pushed says Slurm runs the job on this node;
- the agent holds no other isolation for that job.

Otherwise the slice stays untouched and the answer says why, record by record.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from mig.backend import MigInstance
from slurm_plugin.agent.journal import SliceJournal
from slurm_plugin.agent.state import Assignment

log = logging.getLogger(__name__)

RESTORED_NOTE = "restored from the controller's copy of the slice journal (state and journal lost)"


@dataclass
class RestoreOutcome:
    restored: list[str] = field(default_factory=list)
    left_alone: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"restored": self.restored, "left_alone": self.left_alone}


def restore_slices(records: Iterable[dict], jobs: dict[int, Assignment], unsure: set[str],
                   live: dict[str, MigInstance], running: set[int] | None, journal: SliceJournal,
                   backend=None) -> RestoreOutcome:
    """Take back each record that the GPU and the job list confirm (``jobs`` and ``unsure``
    are changed in place, each taken slice journaled); say why for each one left alone."""
    out = RestoreOutcome()
    for doc in records:
        try:
            a = Assignment.from_dict(doc)
        except (KeyError, TypeError, ValueError) as exc:
            out.left_alone.append(f"a malformed record skipped ({exc!r})")
            continue
        uuid, what = a.device_uuid, f"job {a.job_id}'s {a.profile}@{a.start} on GPU {a.gpu_index}"
        inst = live.get(uuid or "")
        why = None
        if uuid not in unsure:
            why = "the agent accounts for that slice already" if inst is not None else "no such slice here"
        elif inst is None:
            why = f"{uuid} is no longer on the GPU"
        elif (inst.gpu_index, inst.profile, inst.start) != (a.gpu_index, a.profile, a.start):
            why = f"the GPU has {inst.profile}@{inst.start} on GPU {inst.gpu_index} there"
        elif running is None:
            why = "no job list from the helper: cannot confirm the job runs here; slice left alone"
        elif a.job_id not in running:
            why = "Slurm does not run the job here; slice left alone until it is known to be idle"
        elif a.job_id in jobs:
            why = f"the agent already holds job {a.job_id} elsewhere; slice left alone"
        if why is not None:
            out.left_alone.append(f"{what}: {why}")
            continue
        a.gi_id = inst.gi_id
        a.notes.append(RESTORED_NOTE)
        jobs[a.job_id] = a
        unsure.discard(uuid)
        journal.assign(a)
        if backend is not None and hasattr(backend, "set_owner"):
            backend.set_owner(a.gpu_index, inst.gi_id, a.owner)
        out.restored.append(f"{what} ({uuid}) is its slice again")
    for line in out.restored:
        log.info("restore: %s", line)
    for line in out.left_alone:
        log.warning("restore: %s", line)
    return out
