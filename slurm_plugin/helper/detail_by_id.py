"""22.05: a running GPU job's detail read by id (`scontrol -d show job ID`), not from the whole
JSON listing that 22.05's `squeue --json` makes of any query (at 50,000 queued jobs it did not
finish within the watcher's 10 s command timeout, so the running jobs' GPU indexes never came).

One `REQUEST_JOB_INFO_SINGLE` a job, for the running GPU jobs whose run the reader has no detail
for yet, at most :data:`BY_ID_AT_MOST` a round (the rest the next rounds: after a watcher's
restart on a busy site, all its running jobs at once). A record that cannot be read safely
(`slurm.show_job_text`: a user's text that repeats a field) or whose nodes are not the
listing's is not taken: the job waits for the whole listing, as before, and is not asked for
again while the same run lasts. Pending jobs' excluded nodes still come with the whole listing.
"""
from __future__ import annotations

import logging
from dataclasses import replace

from slurm_plugin.slurm.errors import SlurmCommandError
from slurm_plugin.slurm.gres import expand_hostlist, parse_gres_item
from slurm_plugin.slurm.model import Job
from slurm_plugin.slurm.show_job_text import ShowJobTextError, job_allocation

log = logging.getLogger(__name__)

BY_ID_AT_MOST = 20  # jobs read by id in one round


class DetailsById:
    """The running jobs' detail read one job at a time (22.05), and the runs refused."""

    def __init__(self, at_most: int = BY_ID_AT_MOST):
        self.at_most = at_most
        self.refused: dict[int, tuple] = {}  # job -> the run whose record was refused (not asked again)
        self.refusals = 0  # records refused since the start (hostile or unreadable text)

    def read(self, runner, jobs: dict[int, Job], need: list[int], keys: dict[int, tuple | None]) -> tuple[dict[int, Job], int]:
        """The detail of the running jobs among ``need`` (``keys``: `queue_read._detail_key`),
        read by id; (job -> its detail, commands run)."""
        self.refused = {j: k for j, k in self.refused.items() if keys.get(j) == k}
        wanted = [j for j in need if (keys[j] or ("",))[0] == "run" and j not in self.refused][:self.at_most]
        found: dict[int, Job] = {}
        for job_id in wanted:
            job = jobs[job_id]
            try:
                shown = job_allocation(runner, job_id)
            except SlurmCommandError as exc:
                log.info("job %d: scontrol -d show job failed (%s); it waits for the whole listing", job_id, exc)
                continue
            except ShowJobTextError as exc:
                self._refuse(job_id, keys[job_id], str(exc))
                continue
            if shown is None:
                continue  # gone since the listing
            if shown.hosts != tuple(expand_hostlist(job.nodes)):
                self._refuse(job_id, keys[job_id], f"its allocation names {list(shown.hosts)}, the listing {job.nodes}")
                continue
            items = tuple(item for item in map(parse_gres_item, shown.gres) if item is not None)
            if len(items) != len(shown.gres):
                self._refuse(job_id, keys[job_id], f"an allocation it cannot read: {list(shown.gres)}")
                continue
            found[job_id] = replace(job, gres_detail=items, excluded_nodes=shown.excluded_nodes)
        return found, len(wanted)

    def _refuse(self, job_id: int, key: tuple | None, why: str) -> None:
        self.refused[job_id] = key or ()
        self.refusals += 1
        log.warning("job %d: its `scontrol -d show job` record is not read (%s); it waits for the whole listing",
                    job_id, why)
