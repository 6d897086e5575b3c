"""Slurm's commands against the dev cluster: the environment that points them at it."""
from __future__ import annotations

import os
import subprocess

from slurm_plugin.devcluster.spec import ClusterSpec

__all__ = ["cluster_env", "run_slurm"]


def cluster_env(spec: ClusterSpec) -> dict[str, str]:
    """SLURM_CONF and GPUPACK_CONFIG of the cluster (``devcluster env`` prints them)."""
    return {"SLURM_CONF": str(spec.slurm_conf), "GPUPACK_CONFIG": str(spec.gpupack_toml)}


def run_slurm(spec: ClusterSpec, *args: str, timeout: float = 15.0) -> subprocess.CompletedProcess:
    """Run one Slurm command (``args``) against the cluster; output captured as text."""
    return subprocess.run(
        list(args), env={**os.environ, **cluster_env(spec)}, capture_output=True, text=True, timeout=timeout
    )
