"""Record a finished job's observed usage under its fingerprint.

The fingerprint is the one the submit path wrote into the job's AdminComment (`fp=`);
for a job that has none (observe mode, or submitted before the suite was installed) it is
computed again from the job's user, name and batch script.
"""
from __future__ import annotations

import logging
import time

from packer.comment import parse
from packer.fingerprint import fingerprint
from packer.store import RunRecord, Store, UnmeasuredRun
from slurm_plugin.slurm.runner import SlurmRunner

log = logging.getLogger(__name__)
GIB = 1024**3


def job_fingerprint(runner: SlurmRunner, job_id: int) -> tuple[str, str, str]:
    """(fingerprint, user, name) of a job Slurm still knows."""
    job = runner.job(job_id)
    record = parse(job.admin_comment)
    if record is not None and record.fingerprint:
        return record.fingerprint, job.user or "", job.name or ""
    script = runner.batch_script(job_id)
    return fingerprint(job.user or "", job.name or "", script.encode("utf-8", "surrogateescape")), job.user or "", job.name or ""


def record_job(
    store: Store,
    runner: SlurmRunner,
    job_id: int,
    peak_mem_bytes: int,
    mean_util_pct: float | None,
    throughput: float | None = None,
    source: str = "observed",
    started_at: float = 0.0,
) -> RunRecord:
    """Record one run (`started_at`: when it began, the agent's clock) under the job's
    fingerprint. Raises `UnmeasuredRun` for a run with no GPU memory measured: it is
    not history. A run the monitor recorded already is merged into its row, without an event."""
    if peak_mem_bytes <= 0:
        raise UnmeasuredRun(f"job {job_id}: no GPU memory measured; a run without a peak is not history")
    fp, user, name = job_fingerprint(runner, job_id)
    run = RunRecord(
        job_id=job_id, fingerprint=fp, peak_mem_bytes=int(peak_mem_bytes), mean_util_pct=mean_util_pct,
        throughput=throughput, user=user, name=name, ended_at=time.time(), source=source, started_at=started_at,
    )
    if store.record_run(run):
        store.log_event("history", f"recorded peak {peak_mem_bytes / GIB:.2f}GiB util {mean_util_pct}", job_id, fingerprint=fp)
    log.info("job %d: recorded peak %.2f GiB, util %s under %s", job_id, peak_mem_bytes / GIB, mean_util_pct, fp)
    return run
