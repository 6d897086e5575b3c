"""`gpupack epilog`: Slurm's Epilog hook; records what a finished job used on its GPU."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import click

from slurm_plugin.helper.settings import DEFAULT_CONFIG

log = logging.getLogger(__name__)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", type=click.Path(path_type=Path), default=DEFAULT_CONFIG, show_default=True,
              envvar="GPUPACK_CONFIG", help="gpupack.toml naming the database and the agents' folder.")
@click.option("--job-id", type=int, default=None, help="The job (default: $SLURM_JOB_ID, as Slurm sets it).")
@click.option("--node", default=None, help="The node (default: $SLURMD_NODENAME).")
def epilog(config: Path, job_id: int | None, node: str | None) -> None:
    """Run from Slurm's Epilog: record the job's observed peak memory and utilisation.

    It asks the node agent for the job's final summary and stores it under the job's
    fingerprint, so the next run of the same job can be packed. It never fails the node:
    every problem is logged and it exits 0.
    """
    logging.getLogger().setLevel(min(logging.getLogger().level, logging.INFO))
    try:
        _record(config, job_id or int(os.environ.get("SLURM_JOB_ID", "0")), node or os.environ.get("SLURMD_NODENAME", ""))
    except Exception as exc:  # an Epilog that fails drains the node: log and go on
        log.error("epilog: nothing recorded: %s", exc)


def _record(config: Path, job_id: int, node: str) -> None:
    from packer.store import Store
    from slurm_plugin.agent.client import final_stats
    from slurm_plugin.helper.settings import load_paths
    from slurm_plugin.history_recorder import record_job
    from slurm_plugin.slurm.runner import SlurmRunner

    if not job_id or not node:
        log.error("epilog: no job id or node name (SLURM_JOB_ID/SLURMD_NODENAME unset)")
        return
    paths = load_paths(config)
    if paths.agent_dir is None:
        log.error("epilog: [paths] agent_dir is not set in %s", config)
        return
    stats = final_stats(paths.agent_dir, node, job_id)
    if not stats or not stats.get("samples"):
        log.info("epilog: job %d on %s has no GPU observation; nothing to record", job_id, node)
        return
    if not int(stats.get("peak_mem_bytes") or 0):
        log.info("epilog: job %d on %s used no GPU memory that was measured; nothing to record", job_id, node)
        return
    runner = SlurmRunner(slurm_conf=str(paths.slurm_conf) if paths.slurm_conf else None, timeout=10)
    store = Store(paths.database)
    try:
        record_job(store, runner, job_id, int(stats["peak_mem_bytes"]), stats.get("mean_util_pct"),
                   stats.get("mean_throughput"), started_at=float(stats.get("started_at") or 0.0))
    finally:
        store.close()
