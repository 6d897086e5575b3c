"""The one Slurm question the node agent asks: which jobs still hold this node."""
from __future__ import annotations

import logging
from typing import Callable

from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.gres import expand_hostlist

log = logging.getLogger(__name__)

HOLDING_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "RESIZING"})


def running_jobs_lister(node: str, runner=None) -> Callable[[], "set[int] | None"]:
    """A function returning the ids of jobs that hold ``node`` now (None: Slurm did not answer)."""

    def lister() -> set[int] | None:
        nonlocal runner
        if runner is None:
            from slurm_plugin.slurm.runner import SlurmRunner

            runner = SlurmRunner(timeout=10.0)
        try:
            jobs = runner.jobs()
        except (SlurmError, OSError) as exc:
            log.warning("cannot list jobs from Slurm (%s); freeing nothing until it answers", exc)
            return None
        return {j.job_id for j in jobs if (j.state or "") in HOLDING_STATES and node in expand_hostlist(j.nodes)}

    return lister
