"""A cluster of a benchmark's own: a claimed block of ports, a fresh state folder, taken down
at the end however the benchmark ends (the dev cluster's fixed ports are other sessions')."""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from slurm_plugin.devcluster.manager import DevCluster
from slurm_plugin.devcluster.ports import claim_block
from slurm_plugin.devcluster.spec import ClusterSpec

log = logging.getLogger(__name__)


@contextmanager
def own_cluster(spec: ClusterSpec = ClusterSpec(), keep: bool = False) -> Iterator[DevCluster]:
    """Bring up ``spec`` (its port and state folder replaced by a claimed block and a fresh
    folder under /var/tmp); down and removed on exit (the folder kept with ``keep``)."""
    claim = claim_block()
    state = Path(tempfile.mkdtemp(prefix=f"gpupack-bench-{claim.base}-", dir="/var/tmp"))
    spec = replace(spec, state_dir=state, port=claim.base)
    cluster = DevCluster(spec)
    try:
        (state / "spec.json").write_text(json.dumps(spec.to_json(), indent=1))
        log.info("bench cluster in %s on ports %d-", state, claim.base)
        cluster.up()
        yield cluster
    finally:
        try:
            try:
                _end_jobs(cluster)
            except (OSError, subprocess.SubprocessError) as exc:  # the cluster goes down all the same
                log.warning("ending the bench cluster's jobs failed: %s", exc)
            cluster.down()
        finally:
            claim.release()
            if not keep:
                shutil.rmtree(state, ignore_errors=True)


def _end_jobs(cluster: DevCluster, timeout_s: float = 60.0) -> None:
    """Cancel the running jobs of the bench's cluster (all are its own) and wait for them to
    end, so no job script outlives its slurmd (pending ones go with slurmctld). Its partitions
    are set DOWN first: else the queued jobs start on the GPUs the cancelled ones free, after
    the listing below, and outlive the cluster (seen with a queue of 20,000)."""
    if not controller_answers(cluster):
        return
    for name in _partitions(cluster):
        cluster._slurm("scontrol", "update", f"PartitionName={name}", "State=DOWN", timeout=60)
    cluster._slurm("scancel", "--full", "--state=RUNNING", timeout=60)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        left = cluster._slurm("squeue", "-h", "-t", "RUNNING,COMPLETING", "-o", "%i", timeout=60).stdout.split()
        if not left:
            return
        time.sleep(1)
    log.warning("jobs still running on the bench cluster after %.0f s: %s", timeout_s, " ".join(left[:10]))


def controller_answers(cluster: DevCluster, timeout_s: float = 30.0) -> bool:
    """Whether the cluster's slurmctld answers `scontrol ping` within ``timeout_s``. Asked,
    not read from the process registry: a slurmctld that re-executed on `scontrol reconfigure`
    runs under a pid its file may not name yet (a teardown that trusted the registry then
    cancelled nothing, and the running jobs outlived the cluster)."""
    if not any(p.role == "slurmctld" for p in cluster.registry.load()):
        return False  # never started
    deadline = time.time() + timeout_s
    while True:
        ping = cluster._slurm("scontrol", "ping", timeout=10)
        if ping.returncode == 0 and "UP" in ping.stdout:
            return True
        if time.time() >= deadline:
            return False
        time.sleep(0.5)


def _partitions(cluster: DevCluster) -> list[str]:
    """The partitions slurmctld knows (`sinfo -h -o %R`)."""
    done = cluster._slurm("sinfo", "-h", "-o", "%R", timeout=60)
    return sorted({line.strip() for line in done.stdout.splitlines() if line.strip()})
