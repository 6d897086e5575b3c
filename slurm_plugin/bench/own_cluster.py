"""A cluster of a benchmark's own: a claimed block of ports, a fresh state folder, taken down
at the end however the benchmark ends (the dev cluster's fixed ports are other sessions')."""
from __future__ import annotations

import json
import logging
import shutil
import tempfile
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
            cluster.down()
        finally:
            claim.release()
            if not keep:
                shutil.rmtree(state, ignore_errors=True)
