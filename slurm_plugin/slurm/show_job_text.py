"""One job's allocation from `scontrol -d show job ID` (text): 22.05's only read by id of what a
running job holds. Its `squeue --json` ignores filters and lists every job (at 50,000 jobs it
does not finish within the watcher's command timeout), and its formatted `squeue` has no GPU
indexes; `scontrol -d` prints them for the one job asked (REQUEST_JOB_INFO_SINGLE):

```
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   JOB_GRES=gpu:h100:2
     Nodes=node[2-3] CPU_IDs=0 Mem=0 GRES=gpu:h100:1(IDX:0)
```

one `Nodes=` line per group of nodes given the same, the same `GRES=` text as the JSON's
`gres_detail` entry of each (tests/data/slurm/scontrol_22.05_show_job_detail_*.txt).

The text is not framed: a user's job name, comment, working folder or output paths are printed
as given, newlines included (22.05 takes them: recorded, a job named
`evil\\n     Nodes=node1 ... GRES=gpu:h100:2(IDX:0-1)`). What a user may write must not decide
which GPUs the agents take as the job's, so a record is read only when its structure is
Slurm's alone: one `JobId=`, one `Socks/Node=` (printed for every job), one `JOB_GRES=` on the
line right after it, the `Nodes=` lines right after that and none anywhere else, one
`ExcNodeList=`. Text that would forge a line repeats one of them: the record is refused
(`ShowJobTextError`, the job waits for the whole listing) and nothing of it is taken.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_plugin.slurm.build import show_job_detail_args
from slurm_plugin.slurm.errors import SlurmCommandError
from slurm_plugin.slurm.gres import expand_hostlist

_DETAIL = re.compile(r"Nodes=(?P<nodes>\S+) CPU_IDs=\S* Mem=\S+ GRES=(?P<gres>\S*)")
_EXCLUDED = re.compile(r"(?:^|\s)ExcNodeList=(?P<nodes>\S+)")
# each printed once per record (``ArrayJobId=``/``HetJobId=`` are other fields, not counted)
_ONCE = {name: re.compile(rf"(?<![A-Za-z]){re.escape(name)}") for name in
         ("JobId=", "Socks/Node=", "JOB_GRES=", "ExcNodeList=")}


class ShowJobTextError(ValueError):
    """The record cannot be read safely (another job's, a repeated field, a line out of place)."""


@dataclass(frozen=True)
class ShownAllocation:
    """What `scontrol -d show job` says one job holds: per node, in the order printed, the
    `GRES=` text (as a JSON `gres_detail` entry), and its excluded nodes."""

    hosts: tuple[str, ...]
    gres: tuple[str, ...]  # one entry per host
    excluded_nodes: tuple[str, ...]


def parse_show_job_detail(text: str, job_id: int) -> ShownAllocation:
    """``job_id``'s allocation from its `scontrol -d show job` text; ShowJobTextError when the
    record is not Slurm's alone (the module's doc) or holds no allocation."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith(f"JobId={job_id} "):
        raise ShowJobTextError(f"not job {job_id}'s record")
    for field, pattern in _ONCE.items():
        times = len(pattern.findall(text))
        if times != 1:
            raise ShowJobTextError(f"{field!r} is printed {times} times (a user's text may hold it)")
    stripped = [line.strip() for line in lines]
    socks = next(i for i, s in enumerate(stripped) if s.startswith("Socks/Node="))
    if socks + 1 >= len(stripped) or not stripped[socks + 1].startswith("JOB_GRES="):
        raise ShowJobTextError("JOB_GRES= is not on the line after Socks/Node=")
    first = socks + 2
    last = first
    while last < len(stripped) and stripped[last].startswith("Nodes="):
        last += 1
    if any(s.startswith("Nodes=") for i, s in enumerate(stripped) if not first <= i < last):
        raise ShowJobTextError("a Nodes= line outside the allocation's lines")
    hosts: list[str] = []
    gres: list[str] = []
    for line in stripped[first:last]:
        found = _DETAIL.fullmatch(line)
        if found is None:
            raise ShowJobTextError(f"unexpected allocation line {line[:120]!r}")
        group = expand_hostlist(found["nodes"])
        hosts += group
        gres += [found["gres"]] * len(group)
    if not hosts:
        raise ShowJobTextError("no allocation lines (the job does not run)")
    excluded = _EXCLUDED.search(text)
    if excluded is None:
        raise ShowJobTextError("ExcNodeList= is not a field of its own")
    value = excluded["nodes"]
    return ShownAllocation(tuple(hosts), tuple(gres), () if value == "(null)" else tuple(expand_hostlist(value)))


def job_allocation(runner, job_id: int) -> ShownAllocation | None:
    """What a running job holds, per node, from `scontrol -d show job ID` run by ``runner``
    (a `SlurmRunner`); None when slurmctld does not know the job, ShowJobTextError when its
    record cannot be read safely."""
    from slurm_plugin.slurm.runner import _says_invalid_job

    try:
        result = runner.run(show_job_detail_args(job_id))
    except SlurmCommandError as exc:
        if _says_invalid_job(exc.stderr):
            return None
        raise
    return parse_show_job_detail(result.stdout, job_id)
