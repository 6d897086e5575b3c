"""Pair avoidance and the 22.05 gpu/shard collision (packer/placement.py)."""
from __future__ import annotations

from packer.placement import (
    Running,
    avoid_nodes,
    gpu_holders,
    merge_exclusions,
    pending_exclusions,
    quirk_collisions,
)


def avoid(pairs):
    keyed = {tuple(sorted(p)) for p in pairs}
    return lambda a, b: tuple(sorted((a, b))) in keyed


def test_a_pending_job_avoids_the_nodes_of_its_avoided_partners():
    running = [
        Running(1, "fpB", ("node1",), packed=True),
        Running(2, "fpC", ("node2",), packed=True),
        Running(3, "fpB", ("node3",), packed=False),  # whole GPU: never shares, no need to avoid
    ]
    assert avoid_nodes("fpA", running, avoid([("fpA", "fpB")])) == {"node1"}
    assert avoid_nodes("fpC", running, avoid([("fpA", "fpB")])) == frozenset()
    assert avoid_nodes(None, running, avoid([("fpA", "fpB")])) == frozenset()


def test_pending_exclusions_for_many_jobs():
    running = [Running(1, "fpB", ("node1", "node2"), packed=True)]
    out = pending_exclusions({7: "fpA", 8: "fpZ"}, running, avoid([("fpB", "fpA")]))
    assert out == {7: {"node1", "node2"}, 8: frozenset()}


def test_merge_keeps_the_users_exclusions():
    assert merge_exclusions(["node9"], [], ["node1"]) == ("node1", "node9")
    # we added node1 before; the partner left node1 and now runs on node2
    assert merge_exclusions(["node1", "node9"], ["node1"], ["node2"]) == ("node2", "node9")
    assert merge_exclusions(["node1"], ["node1"], []) == ()


def test_collision_requeues_the_shard_job_that_came_after_a_whole_gpu_job():
    holders = gpu_holders([
        (10, 100.0, "node1", "gpu", (0,)),
        (11, 105.0, "node1", "shard", (0,)),
        (12, 101.0, "node1", "shard", (1,)),
    ])
    collisions = quirk_collisions(holders)
    assert len(collisions) == 1
    c = collisions[0]
    assert (c.node, c.index, c.requeue, c.keep) == ("node1", 0, 11, (10,))
    assert "23.11.5" in c.reason


def test_collision_requeues_the_whole_gpu_job_that_came_after_shards():
    holders = gpu_holders([(20, 1.0, "n", "shard", (1,)), (21, 2.0, "n", "shard", (1,)), (22, 3.0, "n", "gpu", (1,))])
    (c,) = quirk_collisions(holders)
    assert c.requeue == 22 and c.keep == (20, 21)


def test_no_collision_when_gpus_are_apart():
    holders = gpu_holders([(1, 1.0, "n", "gpu", (0,)), (2, 2.0, "n", "shard", (1,)), (3, 3.0, "m", "shard", (0,))])
    assert quirk_collisions(holders) == []


def test_slow_nodes_needs_every_gpu_busy_none_qualifying_and_a_slow_prediction():
    from packer.corunner import GpuLoad, Newcomer, RunningJob, rank_corunners
    from packer.placement import NodeGpus, slow_nodes

    G = 1 << 30
    speeds = {("hog", "new"): 0.5, ("calm", "new"): 0.98}

    def speed(a, b):
        return speeds.get((a, b), 1.0)

    def gpu(name, *fps, mem=10 * G):
        return GpuLoad(name, 80 * G, tuple(RunningJob(f"{name}/{fp}", fp, mem) for fp in fps))

    def rank(new, loads):
        return rank_corunners(new, loads, rule="best-pair", pair_speed=speed, min_corunner_speed=0.9)

    new = Newcomer("9", "new", 10 * G)
    nodes = [NodeGpus("bad", (gpu("b0", "hog"), gpu("b1", "hog"))),
             NodeGpus("mixed", (gpu("m0", "hog"), gpu("m1", "calm"))),
             NodeGpus("free", (gpu("f0", "hog"), gpu("f1"))),
             NodeGpus("full", (gpu("u0", "calm", mem=75 * G), gpu("u1", "calm", mem=75 * G))),
             NodeGpus("whole", ())]
    slow = slow_nodes(new, nodes, rank, speed, min_speed=0.9)
    assert set(slow) == {"bad"}  # full by memory alone is Slurm's to refuse
    assert slow["bad"] == ("GPU b0: predicted slowdown with job b0/hog (hog): 0.50; "
                           "GPU b1: predicted slowdown with job b1/hog (hog): 0.50")


def test_with_the_limits_a_node_full_by_jobs_or_the_cap_on_its_total_is_kept_off():
    from packer.corunner import GpuLoad, Newcomer, RunningJob, rank_corunners
    from packer.placement import NodeGpus, slow_nodes

    G = 1 << 30

    def gpu(name, *mems):
        return GpuLoad(name, 80 * G, tuple(RunningJob(f"{name}/{i}", f"w{i}", m * G) for i, m in enumerate(mems)))

    def rank(new, loads):
        return rank_corunners(new, loads, rule="lowest-util", max_fraction=0.95, max_jobs_per_gpu=2)

    new = Newcomer("9", "new", 20 * G)
    # 60 GiB there + 20 = 80 of 80 GiB: Slurm's 8 shards hold it, the 95 % cap does not
    nodes = [NodeGpus("capped", (gpu("c0", 30, 30),)), NodeGpus("two", (gpu("t0", 10, 10),)),
             NodeGpus("room", (gpu("r0", 10),))]
    assert slow_nodes(new, nodes, rank, lambda a, b: 1.0, 0.9) == {}  # without the limits: Slurm's count
    kept = slow_nodes(new, nodes, rank, lambda a, b: 1.0, 0.9, limits=(3, 0.95))
    assert kept == {"capped": "GPU c0: 100% of its memory with it (cap 95% of the GPU's total)"}
    kept = slow_nodes(new, nodes, rank, lambda a, b: 1.0, 0.9, limits=(2, 0.95))
    assert set(kept) == {"capped", "two"} and kept["two"] == "GPU t0: 2 jobs (limit 2 a GPU)"
