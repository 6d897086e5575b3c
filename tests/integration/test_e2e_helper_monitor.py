"""End to end on the real cluster: contention requeue at the head with pair avoidance, and an
early restart on a larger partition for a job whose memory grows.

Uses the session fixture `cluster` of tests/integration/conftest.py (3 nodes x 2 simulated
H100s, helper + node agents + SPANK plugin, enforce mode).
"""
from __future__ import annotations

import json
import math
import subprocess
import time

import pytest

from e2e_support import (PY, SLEEP, events, fill_all_but_one_gpu, job_log, simgpu_script, wait_for,
                          watcher_cycle_s, within_rounds)
from store.db import Store
from slurm_plugin.agent import client

pytestmark = pytest.mark.integration



def script(args: str) -> bytes:
    return simgpu_script(args)


def test_newcomer_that_slows_its_neighbour_is_requeued_next_to_start_and_never_packed_with_it_again(cluster):
    try:
        # node1 GPU0: the senior (ResNet18, 2 shares); node1 GPU1 and node2/node3 filled
        senior = cluster.submit(["-J", "e2e-senior", "-w", "node1", "--gres=shard:2"],
                                script("--workload ResNet18 --mem-start 2GiB --iters 3000 --iter-ms 50"))
        cluster.wait(senior, "RUNNING", 30)
        # a job that waits for a whole node, submitted before the newcomer (older, higher basic
        # priority). It is held until the newcomer runs: from 23.11 on (24.11 and 26.05 seen)
        # the scheduler does not start the younger shard job beside the senior while the older
        # whole-node job waits (Reason=Resources, with or without time limits); 22.05 did.
        fillers, waiting = fill_all_but_one_gpu(cluster, "e2e")
        time.sleep(8)  # the senior's throughput alone, before anyone joins it
        newcomer_script = script("--workload LSTM --mem-start 2GiB --iters 2000 --iter-ms 50")
        newcomer = cluster.submit(["-J", "e2e-newcomer", "--gres=shard:2"], newcomer_script)
        cluster.wait(newcomer, "RUNNING", 30)
        assert cluster.job(newcomer)["NodeList"] == "node1"  # beside the senior: nowhere else has room
        cluster.run("scontrol", "release", str(waiting))

        # 40 s of samples beside the senior, then the watcher's next whole rounds to act on them
        (event,) = within_rounds(cluster, lambda: events(cluster, "requeue-contention", newcomer), "contention requeue",
                                 after_s=40)
        assert event.data["hurt"] == [senior] and "lost" in event.detail
        assert cluster.state(senior) == "RUNNING"  # the senior is never touched
        info = cluster.job(newcomer)
        assert info["JobState"] in ("PENDING", "COMPLETING") and int(info["Restarts"]) >= 1
        assert "node1" in info["ExcNodeList"]
        assert int(info["Nice"]) < 0  # lifted by a nice, not given a priority Slurm never computes again

        # once it is back in the queue and eligible (the helper skips Slurm's requeue delay as
        # soon as the old run is gone), free node2: the requeued newcomer, not the older
        # waiting job, is the next to start
        # (eligible: the scheduler has judged it since, "None" right after the requeue is not yet)
        wait_for(lambda: (lambda j: j["JobState"] == "PENDING" and j.get("Reason") in ("Resources", "Priority"))(
            cluster.job(newcomer)), 20, "requeued newcomer eligible again")
        # above the older waiting job. Slurm may compute the priority again when the old run's
        # clean-up ends (26.05 seen: one below the lifted one, level with the waiting job); the
        # keep-at-head watch lifts it again on its next round
        within_rounds(cluster, lambda: int(cluster.job(newcomer)["Priority"]) > int(cluster.job(waiting)["Priority"]),
                      "requeued newcomer above the older waiting job")
        cluster.run("scancel", str(fillers["node2"]))
        cluster.wait(newcomer, "RUNNING", 40)
        assert cluster.job(newcomer)["NodeList"] == "node2"
        assert cluster.state(waiting) == "PENDING"
        # the lift ended when it started: its owner's nice back, and the priority Slurm
        # computes (below the older waiting job's again), not one above every job for good
        wait_for(lambda: cluster.job(newcomer)["Nice"] == "0", 20, "the head-of-queue lift ended")
        assert int(cluster.job(newcomer)["Priority"]) < int(cluster.job(waiting)["Priority"])

        fp_new, fp_senior = event.data["fingerprint"], event.data["avoided"][0]
        store = Store(cluster.spec.database)
        try:
            assert store.pairs.must_avoid(fp_new, fp_senior)
        finally:
            store.close()

        # the same workload again, while the senior runs: it is kept off the senior's node
        again = cluster.submit(["-J", "e2e-newcomer", "--gres=shard:2", "--hold"], newcomer_script)
        within_rounds(cluster, lambda: "node1" in cluster.job(again)["ExcNodeList"], "pair avoidance on a pending copy")
        cluster.run("scontrol", "release", str(again))
        time.sleep(4)
        assert cluster.job(again)["NodeList"] in ("", "(null)", "node2", "node3")
    finally:
        cluster.cancel_all()


def test_job_whose_memory_grows_is_restarted_on_a_larger_partition_before_oom(cluster, tmp_path):
    out = tmp_path / "grow.out"
    try:
        # one share = one MIG memory slice (~10 GiB); the job would reach 13.7 GiB at its end, 30 MiB
        # an iteration. It crosses its slice's size after 273 iterations: at least 14 s, or 5 of the
        # watcher's cycles as they come now (a loaded machine stretches them: 20 s seen in CI, where
        # a job that crossed in 14 s ran out of memory before any round had judged its growth)
        # The time limit, which the forecast runs to, stays near 4 crossing times at most (as at 14 s
        # in one minute): a longer one reads the same growth as a whole GPU's worth
        cross_s = max(14.0, 5 * watcher_cycle_s(cluster))
        iter_ms = round(cross_s * 1000 / 273)
        limit_min = math.ceil((1.25 * 400 * iter_ms / 1000 + 10) / 60)
        job = cluster.submit(["-J", "e2e-grow", "-t", str(limit_min), "--gres=shard:1", "-o", str(out)],
                             script(f"--mem-start 2GiB --mem-growth 30MiB --iters 400 --iter-ms {iter_ms}"))
        (event,) = within_rounds(cluster, lambda: events(cluster, "restart-memory", job), "early restart",
                                 after_s=cross_s, explain=lambda: f"iter_ms {iter_ms}; {job_log(cluster, job)}")
        assert event.data["from_shards"] == 1
        assert event.data["observed_peak_bytes"] < 10 * 1024**3  # before it hit its partition's size
        new_shards = int(event.data["to"].split(":")[1])
        assert new_shards > 1
        assert cluster.wait(job, {"COMPLETED", "FAILED", "OUT_OF_MEMORY"}, 60 + 2 * 400 * iter_ms / 1000) == "COMPLETED"
        info = cluster.job(job)
        assert int(info["Restarts"]) == 1 and info["TresPerNode"].endswith(f"shard:{new_shards}")
        assert "memory-restart" in info["AdminComment"]
        text = out.read_text()
        assert "done 400 iterations" in text and "out of memory" not in text.lower()
        store = Store(cluster.spec.database)
        try:
            assert store.remembered_size(event.data["fingerprint"]) == new_shards
        finally:
            store.close()
    finally:
        cluster.cancel_all()


def test_idle_mig_slices_follow_the_pending_queue(cluster):
    """Pending packed jobs (not yet eligible) make the agents lay out idle slices of their
    size ahead of them; nothing a job holds is touched, and each change is an event."""
    from gpus.sim.backend import SimGpuBackend

    started = time.time()
    try:
        holder = cluster.submit(["-J", "e2e-layout-holder", "-w", "node1", "--gres=shard:4"], SLEEP)
        cluster.wait(holder, "RUNNING", 30)
        for _ in range(3):
            cluster.submit(["-J", "e2e-layout", "--begin=now+300", "--gres=shard:1"], SLEEP)

        def changes():
            store = Store(cluster.spec.database)
            try:
                return [e for e in store.events(limit=500) if e.kind == "mig-reconfigure" and e.at >= started
                        and e.data.get("node") == "node1"]
            finally:
                store.close()

        # node1's simulated GPUs, as node1 sees them (its own on the multi-host layout)
        backend = SimGpuBackend(cluster.node_path("node1", cluster.spec.simgpu_dir), "node1")

        def instances():
            return [i for g in (0, 1) for i in backend.list_instances(g)]

        def holder_device():
            status = client.ask(cluster.node_view("node1") / "run" / "agent-node1.sock", {"op": "status"})
            return status["jobs"].get(str(holder), {}).get("device")

        device = wait_for(holder_device, 20, f"node1's agent gave job {holder} its slice")
        (held,) = [i for i in instances() if i.uuid == device]
        assert held.profile == "3g.40gb", held

        def where(i):  # what identifies a slice and its place on the GPU
            return (i.gpu_index, i.gi_id, i.profile, i.start, i.size, i.uuid, i.owner)

        # the agent lays the slices out over one change or several (a round each), and a round
        # whose queue was read while the holder still waited may first lay out a slice for it
        # (corrected the round after): wait for the layout the queue asks for, as
        # `gpupack mig assert` on node1's host reads it through NVML (the agent's own path), to
        # match what the agent last decided. Slices left idle by earlier tests may serve too.
        seen: list = []

        def asserted_layout():
            done = subprocess.run(
                [*cluster.on_node("node1"), PY, "-m", "slurm_plugin", "mig", "assert", "--node", "node1",
                 "--node-state-dir", str(cluster.state_dir), "--nvml-library", f"simulated:{cluster.spec.simgpu_dir}",
                 "--json"], env=cluster.env, capture_output=True, text=True, timeout=60)
            assert done.returncode in (0, 1), (done.returncode, done.stdout, done.stderr)  # 2: could not read
            report = json.loads(done.stdout)
            seen[:] = [report, instances()]
            assert (done.returncode == 0) == report["match"], report
            if not report["match"]:
                return None  # between two steps of a change
            assert [g["gpu_index"] for g in report["gpus"]] == [0, 1], report
            placements = [p for g in report["gpus"] for p in g["actual"]["placements"]]
            idle = [i for i in seen[1] if i.uuid != device and i.profile == "1g.10gb" and not i.busy]
            ready = sum(p.startswith("1g.10gb@") for p in placements) >= 3 and len(idle) >= 3
            return (placements, seen[1]) if ready else None

        placements, now_there = within_rounds(
            cluster, asserted_layout, "3 idle 1g.10gb slices on node1 for the 3 pending 1-share jobs, as asserted",
            rounds=4, after_s=5, explain=lambda: f"the last assert and node1's instances: {seen}")
        # the running job's slice is untouched: the same instance, where it was, still its own
        assert f"{held.profile}@{held.start}" in placements
        assert [where(i) for i in now_there if i.uuid == device] == [where(held)], now_there
        assert holder_device() == device and cluster.state(holder) == "RUNNING"
        wait_for(changes, 20, "a mig-reconfigure event for node1's new layout")
    finally:
        cluster.cancel_all()
