"""The one Slurm question the node agent asks: which jobs still hold this node."""
from __future__ import annotations

import logging
from typing import Callable

from slurm_plugin.slurm.errors import SlurmError

log = logging.getLogger(__name__)



def running_jobs_lister(node: str, runner=None) -> Callable[[], "set[int] | None"]:
    """A function returning the ids of jobs that hold ``node`` now (None: Slurm did not answer)."""

    def lister() -> set[int] | None:
        nonlocal runner
        if runner is None:
            from slurm_plugin.slurm.runner import SlurmRunner

            runner = SlurmRunner(timeout=10.0)
        try:
            return runner.job_ids_on_node(node)
        except (SlurmError, OSError, ValueError) as exc:
            log.warning("cannot list jobs from Slurm (%s); freeing nothing until it answers", exc)
            return None

    return lister
