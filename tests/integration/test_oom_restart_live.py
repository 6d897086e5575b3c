"""A packed job that runs out of memory in its share, on the real cluster.

Its memory jumps from 5 GiB to 15 GiB in one step in a one-share MIG slice (10 GiB). The slice
fences it: its neighbour on the same GPU runs on untouched. Its step's end (exit 1 after the
failed allocation) is held by the node agent until the helper has requeued it on two shares, so
Slurm never marks it FAILED: its `afternotok` dependent never starts, and it ends COMPLETED
after exactly one `restart-oom` requeue. Three ways the failed allocation is known, each the
job's word (a retry at its own place in the queue, no lift): it tells the agent
(`--oom-report`, as an opt-in observer would), or it tells nobody and prints what PyTorch or
JAX prints, which the agent reads in the tail of its output file (the job starts its work at
once: an end that comes before any job list named it waits for one). Asserted through Slurm (state, restarts, request, run
time) and the event log and store.

Uses `idle_cluster` of tests/integration/e2e_support.py (the session's `cluster`, emptied).
"""
from __future__ import annotations

import time

import pytest

from e2e_support import SLEEP, events, job_log, simgpu_script, through_rounds, wait_for
from store.db import Store

pytestmark = pytest.mark.integration

GIB = 1024**3


#: how the job's failed allocation is known: its simgpu options, and the event's `seen_in`
SOURCES = {
    "report": ("--oom-report", None),
    "pytorch": ("--framework pytorch", "output:pytorch:"),
    "jax": ("--framework jax", "output:jax:"),
}


@pytest.mark.parametrize("source", list(SOURCES))
def test_a_job_out_of_memory_in_its_share_is_requeued_bigger_before_it_fails(idle_cluster, tmp_path, source):
    option, seen_in = SOURCES[source]
    cluster = idle_cluster
    jump_out, neighbour_out = tmp_path / "jump.out", tmp_path / "neighbour.out"
    # node1's second GPU taken, so the neighbour and the jumping job share node1's first GPU
    filler = cluster.submit(["-J", "oom-fill", "-w", "node1", "--gres=shard:5"], SLEEP)
    cluster.wait(filler, "RUNNING", 30)
    neighbour = cluster.submit(["-J", "oom-neighbour", "-w", "node1", "--gres=shard:2", "-o", str(neighbour_out)],
                               simgpu_script("--mem-start 3GiB --iters 800 --iter-ms 50"))
    cluster.wait(neighbour, "RUNNING", 30)
    # it starts its work at once: on a loaded machine its jump (3 s in) may come before any of
    # the helper's job lists named it, and its end then waits for the list that says where its
    # output is (slurm_plugin.agent.oom_desk)
    jumper = cluster.submit(["-J", "oom-jump", "-w", "node1", "--gres=shard:1", "-o", str(jump_out)],
                            simgpu_script(f"{option} --mem-start 5GiB --mem-growth 10GiB --grow-after 60 --grow-iters 61 "
                                          "--iters 200 --iter-ms 50"))
    dependent = cluster.submit(["-J", "oom-dependent", f"--dependency=afternotok:{jumper}"], SLEEP)
    seen: dict[int, set[str]] = {jumper: set(), neighbour: set(), dependent: set()}

    def watch(job: int) -> dict[str, str]:
        info = cluster.job(job)
        seen[job].add(info.get("JobState", ""))
        return info

    def jumper_done() -> bool:
        for job in (neighbour, dependent):
            watch(job)
        return watch(jumper).get("JobState") in ("COMPLETED", "FAILED", "OUT_OF_MEMORY", "CANCELLED")

    wait_for(jumper_done, 120, "the jumping job ends", interval=0.25)
    info = cluster.job(jumper)
    assert info["JobState"] == "COMPLETED", (info["JobState"], seen[jumper], job_log(cluster, jumper))
    # sampled states can miss a brief FAILED; the durable witness is the afternotok dependent
    # below, which Slurm would have started on any failure (asserted never to have run)
    assert "FAILED" not in seen[jumper], seen[jumper]
    # one restart for its out-of-memory end; its next run, on two shares, jumps from 5 to 15 GiB at
    # once again, and the memory forecast may read that step as growth and restart it once more
    # on a larger share (seen on a loaded machine): a decision of its own, with its own event
    later = events(cluster, "restart-memory", jumper)
    assert int(info["Restarts"]) == 1 + len(later) and len(later) <= 1, (info, [e.detail for e in later])
    if not later:
        assert info["TresPerNode"].endswith("shard:2") and "restart-oom" in info["AdminComment"], info
    text = jump_out.read_text()
    assert "done 200 iterations" in text and "peak 15.00 GiB" in text, text

    (event,) = events(cluster, "restart-oom", jumper)
    assert event.data["from_shards"] == 1 and event.data["to"].endswith("shard:2"), event.data
    assert event.data["asked_bytes"] == 10 * GIB and event.data["exit_code"] == 1
    assert 4.5 * GIB <= event.data["peak_bytes"] < 10 * GIB  # what it held: a lower bound, not its size
    # the job's word (its report or its output), not a measurement at its share's limit: no lift
    assert event.data["evidence_kind"] == "reported" and event.data["at_head"] is False, event.data
    if seen_in:
        assert (event.data["seen_in"] or "").startswith(seen_in), event.data
    store = Store(cluster.spec.database)
    try:
        remembered = store.remembered_size(event.data["fingerprint"])
        assert remembered == 2 if not later else remembered >= 2, remembered
        runs = wait_for(lambda: [r for r in store.runs(event.data["fingerprint"])], 30, "the runs recorded")
        first = [r for r in runs if r.lower_bound]
        assert all(r.peak_mem_bytes < 10 * GIB for r in first)  # the failed run is kept as a bound only
    finally:
        store.close()

    # the neighbour on the same GPU ran on untouched, to its end
    assert cluster.wait(neighbour, {"COMPLETED", "FAILED", "CANCELLED"}, 120) == "COMPLETED"
    assert seen[neighbour] <= {"RUNNING", "COMPLETING", "COMPLETED"} and int(cluster.job(neighbour)["Restarts"]) == 0
    assert "done 800 iterations" in neighbour_out.read_text()
    # the dependent waits for a failure that never came
    dep = watch(dependent)
    assert "RUNNING" not in seen[dependent] and dep["RunTime"] == "00:00:00", (dep, seen[dependent])


def test_a_job_that_prints_the_text_without_using_its_gpu_gets_only_capped_retries_at_its_own_place(idle_cluster,
                                                                                                     tmp_path):
    """What a job prints is the job's word: a packed job that prints PyTorch's out-of-memory text
    without having touched its GPU is retried at most `oom_retries_per_job` (2, shipped) times,
    each at its own place in the queue (never lifted), and then stays FAILED."""
    cluster = idle_cluster
    out = tmp_path / "liar.out"
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 14.00 GiB. GPU 0 has a total capacity "
            "of 79.19 GiB of which 1.00 GiB is free.")
    # it prints and fails at once, before any of the helper's job lists named it: its end waits
    # for the list that says where its output is
    script = f"#!/bin/sh\n: 'oom liar {time.time_ns()}'\necho '{text}' >&2\nexit 1\n".encode()
    liar = cluster.submit(["-J", "oom-liar", "--gres=shard:1", "-o", str(out)], script)
    # retried once on the size it named (14 GiB: two shares), where the same text no longer
    # names more than its share: left FAILED (a text naming more each time stops at the cap, 2)
    wait_for(lambda: cluster.state(liar) == "FAILED" and events(cluster, "restart-oom", liar), 240,
             "the job retried, then FAILED")

    def stays_failed() -> None:
        assert cluster.state(liar) == "FAILED"

    through_rounds(cluster, stays_failed, rounds=2)  # nothing requeues it again
    retries = events(cluster, "restart-oom", liar)
    assert 1 <= len(retries) <= 2 and len(retries) == int(cluster.job(liar)["Restarts"]), [e.data for e in retries]
    for event in retries:
        assert event.data["evidence_kind"] == "reported" and event.data["at_head"] is False, event.data
        assert (event.data["seen_in"] or "").startswith("output:pytorch:"), event.data
        assert event.data["peak_bytes"] == 0  # it held nothing on its GPU
    assert cluster.job(liar)["Nice"] == "0"  # never lifted
