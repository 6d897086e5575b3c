"""Safety on the real cluster: the kill switch stops the watcher's actions within a round, and a
contention requeue never strands a job pinned to its node with -w (seen: it stayed PENDING with
BadConstraints for good). Both on the session's cluster (conftest.py)."""
from __future__ import annotations

import time

import pytest

from store.db import Store
from e2e_support import events, fill_all_but_one_gpu, simgpu_script, through_rounds, wait_for, within_rounds
from test_metrics_live import sample, scrape, status_rows

pytestmark = pytest.mark.integration

SENIOR = simgpu_script("--workload ResNet18 --mem-start 2GiB --iters 3000 --iter-ms 50")
NEWCOMER = simgpu_script("--workload LSTM --mem-start 2GiB --iters 2000 --iter-ms 50")


def _packed_beside_the_senior(cluster, tag: str, newcomer_args: list[str]) -> tuple[int, int]:
    """The senior alone on node1's first GPU, everything else full, then a newcomer that slows
    it (the contention test's set-up); (senior, newcomer), both running."""
    senior = cluster.submit(["-J", f"{tag}-senior", "-w", "node1", "--gres=shard:2"], SENIOR)
    cluster.wait(senior, "RUNNING", 30)
    fill_all_but_one_gpu(cluster, tag)
    time.sleep(8)  # the senior's throughput alone
    newcomer = cluster.submit(["-J", f"{tag}-newcomer", "--gres=shard:2", *newcomer_args], NEWCOMER)
    cluster.wait(newcomer, "RUNNING", 30)
    assert cluster.job(newcomer)["NodeList"] == "node1"
    return senior, newcomer


def test_a_contention_requeue_never_strands_a_job_pinned_to_its_node(idle_cluster):
    cluster = idle_cluster
    senior, newcomer = _packed_beside_the_senior(cluster, "pin", ["-w", "node1"])
    # 40 s of samples beside the senior, then the watcher's next whole rounds to act on them
    (skipped,) = within_rounds(cluster, lambda: events(cluster, "requeue-contention-skipped", newcomer),
                               "the contention requeue of a pinned job, skipped", after_s=40)
    assert "pinned to node1 (-w)" in skipped.detail
    info = cluster.job(newcomer)
    assert info["JobState"] == "RUNNING" and int(info["Restarts"]) == 0 and info.get("Reason") != "BadConstraints"
    assert not events(cluster, "requeue-contention", newcomer)
    assert cluster.state(senior) == "RUNNING"


def test_the_kill_switch_stops_the_watchers_requeues_within_a_round(idle_cluster):
    cluster = idle_cluster
    switch = cluster.spec.kill_switch
    watcher_url = next(r["metrics_url"] for r in status_rows(cluster) if r["role"] == "watcher")
    switch.touch()
    try:
        wait_for(lambda: sample(scrape(watcher_url), "gpupack_actions_halted") == 1, 15, "the watcher halted")
        senior, newcomer = _packed_beside_the_senior(cluster, "kill", [])

        def not_requeued() -> None:
            assert cluster.state(newcomer) == "RUNNING" and int(cluster.job(newcomer)["Restarts"]) == 0
            assert not events(cluster, "requeue-contention", newcomer)

        # without the switch the newcomer is requeued well within 40 s (the e2e test): 40 s, and
        # the watcher's rounds in them (a stalled watcher would prove nothing)
        through_rounds(cluster, not_requeued, rounds=3, min_s=40, interval=2.0)
        store = Store(cluster.spec.database)
        try:
            said = [e for e in store.events(limit=500) if e.kind == "kill-switch"]
        finally:
            store.close()
        assert said and said[0].detail.startswith("on: ")
    finally:
        switch.unlink(missing_ok=True)
    # the switch removed: the watcher acts again, on the same pair
    within_rounds(cluster, lambda: events(cluster, "requeue-contention", newcomer), "the contention requeue after the switch",
                  after_s=40)
    assert sample(scrape(watcher_url), "gpupack_actions_halted") == 0
    assert cluster.state(senior) == "RUNNING"
