"""Whether a login may be adopted into its user's job on this node (pam_slurm_adopt).

pam_slurm_adopt moves an ssh session into the user's job: slurmstepd adds the process to the job's
extern step (proctrack, the task plugin's cgroups, accounting; Slurm's
``src/slurmd/slurmstepd/req.c``, ``_handle_add_extern_pid_internal``) and runs no SPANK hook for it,
and the module sets only ``SLURM_JOB_ID`` (and X11's variables). Such a process gets neither the
packed job's ``CUDA_VISIBLE_DEVICES`` nor its fence (docs/fence.md); the extern step's device cgroup is
the job's, whole GPUs (``task_cgroup_devices.c``: the job's GRES, step GRES skipped for the extern
step). So on a node where a user holds a packed job, a login adopted into it could use the whole GPU
its share lies on, other jobs' slices and MPS shares included.

Packed nodes therefore refuse the adoption (``gpupack agent adopt-check``, a pam_exec line before
pam_slurm_adopt): a user who holds a packed job on this node gets no login there. Pure: what the
agent holds decides.
"""
from __future__ import annotations

from collections.abc import Iterable

from slurm_plugin.agent.state import Assignment


def adoption_refusal(assignments: Iterable[Assignment], uid: int) -> str | None:
    """Why a login of ``uid`` must not be adopted into a job on this node (None: it may). Refused
    while ``uid`` holds a packed job here, or while a packed job here has no known user (its
    record predates the user's uid: it could be theirs)."""
    packed = [a for a in assignments if a.shards > 0]
    own = sorted(a.job_id for a in packed if a.uid == uid)
    unknown = sorted(a.job_id for a in packed if a.uid is None)
    if own:
        return (f"uid {uid} holds packed job(s) {', '.join(map(str, own))} on this node: a login adopted into "
                f"a packed job would run outside its isolation (pam_slurm_adopt runs no task hook)")
    if unknown:
        return (f"packed job(s) {', '.join(map(str, unknown))} on this node have no known user; a login could "
                f"be adopted into one of them outside its isolation")
    return None
