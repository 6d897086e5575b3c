"""The grow watch on its own: a packed job that must hold more than its share (here: its workload's
remembered size is larger) on a full GPU has the youngest neighbour it needs evicted (held until
the grower runs again) and restarts at once on the larger size, pinned to its node; with the
neighbours older than it, or the mode off, nothing is evicted."""
from __future__ import annotations

from slurm_plugin.helper.watches.grow import KIND, GrowWatch
from slurm_plugin.slurm.fake import FAKE_EPOCH
from store.ledger import ActionLedger
from tests.unit.helper.rounds_support import GIB, make, running
from tests.unit.helper.watches.watch_support import context, events, tracked

E = float(FAKE_EPOCH)
START = {7: 0, 8: 2, 9: 4}  # job 7 the oldest, job 9 the youngest


def full_gpu(tmp_path, starts=START, **settings):
    """Jobs 7 (shard:2), 8 (shard:4) and 9 (shard:2) fill GPU 0 of node1 (8 shares), flat at 3 GiB;
    job 7's workload is remembered at 4 shares."""
    fake, helper, samples, monitor = make(tmp_path, fixed_clock=True, grow_running_target="min", **settings)
    for job_id, shards, fp in ((7, 2, "grow"), (8, 4, "mid"), (9, 2, "young")):
        running(fake, job_id, fp=fp, shards=shards, start=FAKE_EPOCH + starts[job_id])
    helper.store.remember_size("grow", 4, "restart-memory")
    for t in range(5, 10):
        for job_id in (7, 8, 9):
            samples.put(job_id, E + t, mem=3 * GIB, started_at=E + starts[job_id])
        tracked(monitor, E + t, samples.now.values())
    return fake, helper, monitor


def test_the_youngest_neighbour_is_evicted_and_the_grower_restarts_larger_on_its_node(tmp_path):
    fake, helper, monitor = full_gpu(tmp_path)
    ctx = context(monitor, E + 10)
    GrowWatch().round(ctx)
    grower, mid, young = fake.jobs[7], fake.jobs[8], fake.jobs[9]
    assert mid.state == "RUNNING"  # one eviction was enough: the younger one went
    assert young.state == "PENDING" and young.priority == 0  # held until the grower runs again
    assert monitor.state.held_for_grower == {9: (7, E + 10)}
    assert grower.state == "PENDING" and grower.tres_per_node.endswith("shard:4")
    assert grower.excluded_nodes == "node2"  # pinned to its node
    assert ctx.acted >= {7, 9}
    (evict,) = events(helper, "grow-evict")
    assert evict.job_id == 9 and evict.data["grower"] == 7
    (row,) = ActionLedger(helper.store).rows(KIND)
    assert row.mode == "enforce" and row.data["evicted"] == [9]


def test_neighbours_older_than_the_grower_are_not_evicted(tmp_path):
    fake, helper, monitor = full_gpu(tmp_path, starts={7: 4, 8: 0, 9: 2})  # job 7 now the youngest
    GrowWatch().round(context(monitor, E + 10))
    assert [fake.jobs[j].state for j in (7, 8, 9)] == ["RUNNING"] * 3
    assert events(helper, "grow-evict") == []


def test_the_off_mode_evicts_nothing(tmp_path):
    fake, helper, monitor = full_gpu(tmp_path, actions={KIND: "off"})
    GrowWatch().round(context(monitor, E + 10))
    assert [fake.jobs[j].state for j in (7, 8, 9)] == ["RUNNING"] * 3 and events(helper) == []
