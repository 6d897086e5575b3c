"""A batch job's StdOut/StdErr as files on its batch host, from what squeue reports (pure).

squeue before 24.05 reports the paths as given to sbatch: patterns unexpanded (``%j``, ``%x``,
...), relative to the job's working folder, or empty for the default (``slurm-%j.out``, or
``slurm-%A_%a.out`` for an array task; stderr goes where stdout goes). 24.05 and later also
report them expanded (``stdout_expanded``), which `parse_job` prefers. A pattern this module
cannot expand for the batch step (``%s``, ``%J``, ``%b``...) or a path that stays relative gives
None: the output is then not read, never guessed.
"""
from __future__ import annotations

import posixpath
import re

from slurm_plugin.slurm.model import Job

NO_VAL = 0xFFFFFFF0  # Slurm's NO_VAL family: not an array task
_PATTERN = re.compile(r"%(\d*)([%A-Za-z])")


def _array(job: Job) -> tuple[int, int] | None:
    if job.array_job_id and job.array_task_id is not None and 0 <= job.array_task_id < NO_VAL:
        return job.array_job_id, job.array_task_id
    return None


def expand(template: str, job: Job, node: str | None) -> str | None:
    """``template`` with the batch step's values in; None when a pattern cannot be expanded."""
    if "\\" in template:  # sbatch: a backslash anywhere turns expansion off
        return template.replace("\\", "")
    array = _array(job)
    values: dict[str, str | int | None] = {
        "j": job.job_id, "A": array[0] if array else job.job_id, "a": array[1] if array else None,
        "u": job.user, "x": job.name, "N": node, "n": 0, "t": 0,
    }
    failed = False

    def one(m: re.Match[str]) -> str:
        nonlocal failed
        width, letter = m.group(1), m.group(2)
        if letter == "%":
            return "%"
        value = values.get(letter)
        if value is None:
            failed = True
            return ""
        if isinstance(value, int) and width:
            return str(value).zfill(int(width))
        return str(value)

    out = _PATTERN.sub(one, template)
    return None if failed else out


def output_paths(job: Job, node: str | None = None) -> tuple[str, ...]:
    """The absolute paths of the job's stdout and stderr on its batch host (one when they are
    the same file); () when they cannot be told."""
    node = node or job.batch_host
    array = _array(job)
    default = "slurm-%A_%a.out" if array else "slurm-%j.out"
    out = expand(job.std_out or default, job, node)
    err = expand(job.std_err, job, node) if job.std_err else out
    paths: list[str] = []
    for p in (err, out):
        if p is None or p in ("/dev/null",):
            continue
        if not p.startswith("/"):
            if not job.work_dir or not job.work_dir.startswith("/"):
                continue
            p = posixpath.join(job.work_dir, p)
        if p not in paths:
            paths.append(p)
    return tuple(paths)
