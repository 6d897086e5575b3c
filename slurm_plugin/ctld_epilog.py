"""The controller's epilog (slurm.conf `EpilogSlurmctld`): tell the helper that a job ended.

slurmctld runs it as SlurmUser, for every job, on the controller host: it must start fast, so
it needs nothing but the Python standard library (no click, numpy ... to import): it reads
gpupack.toml with `tomllib` and speaks the helper's wire format
(`slurm_plugin.helper.server.ask`, standard library only) over the helper's local socket.
It never fails: a failing EpilogSlurmctld would hold the job in COMPLETING, and a job the
helper is not told about is found by its sweep of the agents' final summaries. The installed
suite runs it from its venv (etc/gpupack-ctld-epilog.sh):

    /opt/gpupack/venv/bin/python3 -m slurm_plugin.ctld_epilog --config /etc/slurm/gpupack.toml
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tomllib

from slurm_plugin.helper.server import ask

log = logging.getLogger("slurm_plugin.ctld_epilog")
DEFAULT_SOCKET = "/run/gpupack/helper.sock"  # as slurm_plugin.helper.settings.Paths
TIMEOUT_S = 2.0


def helper_socket(config: str) -> str:
    """[paths] socket of gpupack.toml (the default when the file or the key is missing)."""
    try:
        with open(config, "rb") as fh:
            return str(tomllib.load(fh).get("paths", {}).get("socket") or DEFAULT_SOCKET)
    except FileNotFoundError:
        return DEFAULT_SOCKET


def run(config: str, job_id: int, nodes: str) -> str:
    """Tell the helper; returns what happened, one line (also logged). Never raises."""
    if job_id <= 0 or not nodes:
        return "no job id or nodes (SLURM_JOB_ID/SLURM_JOB_NODELIST unset): nothing to tell"
    try:
        answer = ask(helper_socket(config), {"op": "job-ended", "job_id": str(job_id), "nodes": nodes}, TIMEOUT_S)
    except (OSError, ValueError, tomllib.TOMLDecodeError) as exc:
        return f"job {job_id} not told to the helper (its sweep records it later): {exc}"
    if answer.get("status") != "ok":
        return f"the helper did not take job {job_id}: {answer.get('reason')}"
    return f"job {job_id} on {nodes}: told the helper"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpupack ctld-epilog", description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=os.environ.get("GPUPACK_CONFIG", "/etc/slurm/gpupack.toml"))
    parser.add_argument("--job-id", type=int, default=None, help="default: $SLURM_JOB_ID")
    parser.add_argument("--nodes", default=None, help="a Slurm hostlist; default: $SLURM_JOB_NODELIST")
    args = parser.parse_args(argv)
    job_id = args.job_id
    if job_id is None:
        text = os.environ.get("SLURM_JOB_ID", "")
        job_id = int(text) if text.isdigit() else 0
    nodes = args.nodes if args.nodes is not None else os.environ.get("SLURM_JOB_NODELIST", "")
    print(run(args.config, job_id, nodes), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
