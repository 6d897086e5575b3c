"""The soak driver (python3 -m slurm_plugin.bench.soak), small: jobs go through the helper's
socket and watcher, and the store's runs stop growing at the retention rule's bound."""
from __future__ import annotations

from slurm_plugin.bench.soak import soak


def test_a_small_soak_levels_the_runs_off_at_the_retention_bound(tmp_path):
    checkpoints = soak(jobs=80, every=40, workloads=3, folder=tmp_path, events_max_rows=1000, runs_per_fingerprint=5)
    assert [c.jobs for c in checkpoints] == [40, 80]
    # 3 workloads x 5 runs kept each, plus at most one a workload between two prunes
    assert checkpoints[0].runs == checkpoints[-1].runs <= 3 * (5 + 1)
    assert checkpoints[-1].events >= 70  # one history event per finished job, none pruned yet
    assert checkpoints[-1].watcher_job_maps < 40  # the running and recently finished jobs only
