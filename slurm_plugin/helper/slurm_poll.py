"""Fetch the cluster snapshot the helper answers from (the only Slurm I/O of the submit side)."""
from __future__ import annotations

from pathlib import Path

from slurm_plugin.helper.cluster_view import Snapshot


def fetch_snapshot(slurm_conf: Path | None) -> Snapshot:
    raise NotImplementedError("wired to the Slurm adapter next")
