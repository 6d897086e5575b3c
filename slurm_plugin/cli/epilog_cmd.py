"""Slurm's two epilogs. Neither writes the history: only the controller helper does.

- `gpupack ctld-epilog` (slurm.conf `EpilogSlurmctld`, on the controller host, as SlurmUser):
  tells the helper over its local socket which job ended on which nodes; the helper collects
  the job's final summaries from those nodes' agents and records the run.
- `gpupack epilog` (slurm.conf `Epilog`, on the GPU node): asks the node's agent to finish
  the job now (write its final summary, free its MIG instance or MPS share), so the summary
  is there when the helper comes for it. Optional: the agent finishes it by itself at the
  batch step's end, or when it sees Slurm no longer runs the job.

Both are quick and never fail: every problem is logged and they exit 0 (a failing Epilog
drains the node; a failing EpilogSlurmctld holds the job in COMPLETING).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import click

from slurm_plugin.helper.settings import DEFAULT_CONFIG

log = logging.getLogger(__name__)
CTX = {"help_option_names": ["-h", "--help"]}
AGENT_WAIT_S = 2.0

config_option = click.option(
    "--config", type=click.Path(path_type=Path), default=DEFAULT_CONFIG, show_default=True, envvar="GPUPACK_CONFIG",
    help="gpupack.toml ([paths] socket for the helper, agent_dir for the node's agent).")


@click.command(context_settings=CTX)
@config_option
@click.option("--job-id", type=int, default=None, help="The job (default: $SLURM_JOB_ID, as Slurm sets it).")
@click.option("--nodes", default=None, help="Its nodes, a Slurm hostlist (default: $SLURM_JOB_NODELIST).")
def ctld_epilog(config: Path, job_id: int | None, nodes: str | None) -> None:
    """Run from slurm.conf's EpilogSlurmctld: tell the controller helper that a job ended.

    etc/gpupack-ctld-epilog.sh runs `python3 -m slurm_plugin.ctld_epilog` of the suite's venv
    instead: the same, importing the standard library only (it starts faster, for every job)."""
    from slurm_plugin.ctld_epilog import run

    job_id = job_id or _int(os.environ.get("SLURM_JOB_ID"))
    nodes = nodes if nodes is not None else os.environ.get("SLURM_JOB_NODELIST", "")
    log.warning("ctld-epilog: %s", run(str(config), job_id, nodes))


@click.command(context_settings=CTX)
@config_option
@click.option("--job-id", type=int, default=None, help="The job (default: $SLURM_JOB_ID, as Slurm sets it).")
@click.option("--node", default=None, help="The node (default: $SLURMD_NODENAME).")
def epilog(config: Path, job_id: int | None, node: str | None) -> None:
    """Run from Slurm's node Epilog: have the node agent finish the job now."""
    logging.getLogger().setLevel(min(logging.getLogger().level, logging.INFO))
    job_id = job_id or _int(os.environ.get("SLURM_JOB_ID"))
    node = node or os.environ.get("SLURMD_NODENAME", "")
    if not job_id or not node:
        log.error("epilog: no job id or node name (SLURM_JOB_ID/SLURMD_NODENAME unset)")
        return
    try:
        from slurm_plugin.agent.client import final_stats
        from slurm_plugin.helper.settings import load_paths

        paths = load_paths(config)
        agent_dir = paths.agent_dir or Path(paths.database).parent
        if final_stats(agent_dir, node, job_id, wait_s=AGENT_WAIT_S) is None:
            log.info("epilog: job %d on %s left no summary (the agent never isolated it, or is down)", job_id, node)
    except Exception as exc:  # an Epilog that fails drains the node: log and go on
        log.error("epilog: job %d on %s not finished by its agent: %s", job_id, node, exc)


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0
