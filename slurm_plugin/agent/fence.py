"""The MIG fence of a job: the capability device nodes its steps may open.

A process uses a MIG device only if it can open that instance's capability nodes
(:mod:`gpus.nvml.caps`). The SPANK plugin, in each task before privileges drop, puts a
fresh read-only folder over the driver's ``nvidia-caps`` folder holding only the job's own
nodes (its GPU instance's and compute instance's), in a mount namespace of its own: a job
whose user points ``CUDA_VISIBLE_DEVICES`` at another job's slice cannot open that slice.
The agent names those nodes here, read from the driver's proc files as on a real node (for
the simulated GPU, from its driver folder); the plugin reads them in the line
``FENCE <node>[,<node>] <folder>`` (:func:`slurm_plugin.agent.isolation.answer_lines`).

The namespace hides the other nodes from the task's own view only: through
``/proc/<pid>/root`` of a process of the same user outside any fence they are still there.
So the plugin also denies every other MIG capability node in the task's device cgroup
(cgroup v1 ``devices.deny``), from the line ``DENY <major> <lo>-<hi>[,<lo>-<hi>...]``: the
capability nodes' major (``nvidia-caps`` in the driver's ``/proc/devices``) and the ranges of
minors of every MIG access capability the driver numbers (``mig-minors``) but the job's. On a
node without the v1 devices controller the plugin denies them with a cgroup v2 BPF device program
instead (``spank/devcg_v2.h``), in the same cgroups.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from gpus.nvml.caps import CapError, DriverFiles
from mig.errors import MigError
from slurm_plugin.agent.paths import AgentError
from slurm_plugin.agent.state import Assignment

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fence:
    directory: str  # the driver's capability node folder (/dev/nvidia-caps)
    allowed: tuple[str, ...]  # the node names in it the job may open
    caps_major: int | None = None  # the nodes' major, for the device cgroup
    deny: tuple[tuple[int, int], ...] = field(default=())  # minor ranges (inclusive) to deny there

    def to_dict(self) -> dict:
        out: dict = {"directory": self.directory, "allowed": list(self.allowed)}
        if self.caps_major is not None:
            out["caps_major"] = self.caps_major
            out["deny"] = [list(r) for r in self.deny]
        return out


def deny_ranges(every: list[int], keep: set[int]) -> tuple[tuple[int, int], ...]:
    """The minors of ``every`` (sorted) but ``keep``, as inclusive ranges of consecutive minors."""
    out: list[list[int]] = []
    for m in every:
        if m in keep:
            continue
        if out and out[-1][1] == m - 1:
            out[-1][1] = m
        else:
            out.append([m, m])
    return tuple((lo, hi) for lo, hi in out)


def fence_for(driver: DriverFiles, backend, a: Assignment) -> Fence | None:
    """The fence of a job on a MIG device (None on a whole GPU without MIG); AgentError when
    the driver lists no capability for its instance: the step must not run unfenced."""
    if a.gi_id is None or a.gpu_index < 0:
        return None
    ci = next((i.ci_id for i in backend.list_instances(a.gpu_index) if i.gi_id == a.gi_id), None)
    try:  # the driver's files name a GPU by its device minor, which need not be NVML's index
        minor = backend.device_minor(a.gpu_index)
    except MigError as exc:
        raise AgentError(f"cannot fence job {a.job_id} to its MIG instance (GPU {a.gpu_index}): {exc}") from exc
    try:
        nodes = driver.mig_devices(minor, a.gi_id, ci)
    except CapError as exc:
        raise AgentError(f"cannot fence job {a.job_id} to its MIG instance (GPU {a.gpu_index}, GPU "
                         f"instance {a.gi_id}): {exc}") from exc
    try:
        major, every = driver.caps_major(), driver.all_mig_minors()
    except CapError as exc:
        raise AgentError(f"cannot fence job {a.job_id} in its device cgroup: {exc}") from exc
    keep = {int(n.name.removeprefix("nvidia-cap")) for n in nodes}
    return Fence(str(driver.dev_caps), tuple(n.name for n in nodes), major, deny_ranges(every, keep))


# where the plugin makes a step's device cgroup: below the task's cgroup, the root or a
# service's (system.slice/slurmd.service) (spank/gpupack_spank.c, own_cgroup)
_OWN_CGROUPS = ("gpupack/job*_step*_*", "*/gpupack/job*_step*_*", "*/*/gpupack/job*_step*_*")


def device_cgroup_roots(mountinfo: str) -> list[Path]:
    """The mount points, in ``/proc/self/mountinfo`` text, of the hierarchies the plugin makes step
    device cgroups in: the cgroup v1 devices controller's and cgroup v2's (the plugin uses the first
    where both exist; a hybrid host such as Debian's with systemd's legacy layout has both)."""
    out = []
    for line in mountinfo.splitlines():
        fields, sep, tail = line.partition(" - ")
        parts, fs = fields.split(), tail.split()
        if not sep or len(parts) < 5 or len(fs) < 3:
            continue
        if (fs[0] == "cgroup" and "devices" in fs[2].split(",")) or fs[0] == "cgroup2":
            out.append(Path(parts[4]))
    return out


def prune_device_cgroups(roots: list[Path] | None = None, proc: Path = Path("/proc")) -> list[str]:
    """Remove the plugin's step device cgroups (v1 or v2) whose step daemon is gone (one killed
    before it could remove its own at the step's end; a v2 one's device program goes with it); a
    cgroup a process is still in stays (the kernel refuses to remove it). ``roots``: the
    hierarchies' mount points, by default this host's (:func:`device_cgroup_roots`). Returns what
    was removed."""
    if roots is None:
        roots = device_cgroup_roots(Path("/proc/self/mountinfo").read_text())
    done = []
    for root, pattern in ((r, p) for r in roots for p in _OWN_CGROUPS):
        for cg in root.glob(pattern):
            stepd = cg.name.rsplit("_", 1)[1]
            if not stepd.isdigit() or (proc / stepd).exists():
                continue
            try:
                cg.rmdir()
            except OSError as exc:
                log.debug("device cgroup %s of a gone step daemon stays: %s", cg, exc.strerror)
                continue
            done.append(f"removed the device cgroup {cg} (its step daemon {stepd} is gone)")
    return done
