"""The memory watch on its own: a packed job whose memory forecast crosses its share is requeued
at the head on a larger size (remembered for its workload); a job well inside its share is left
running; shadow mode only says what it would do."""
from __future__ import annotations

from slurm_plugin.helper.watches.memory import KIND, MemoryWatch
from slurm_plugin.slurm.fake import FAKE_EPOCH
from tests.unit.helper.rounds_support import GIB, make, running
from tests.unit.helper.watches.watch_support import context, events, round_of, tracked

E = float(FAKE_EPOCH)


def growing(tmp_path, per_s: float, mode="enforce", seconds=24):
    """A shard:1 job (10 GiB) from 2 GiB, growing `per_s` GiB a second, tracked for `seconds` (at
    0.3 GiB/s it reaches its share at 27 s: within the time to act of the 24th second)."""
    fake, helper, samples, monitor = make(tmp_path, mode, fixed_clock=True, memory_horizon_s=60)
    running(fake, 7, fp="grow", shards=1)
    for t in range(seconds):
        samples.put(7, E + t, mem=int(2 * GIB + t * per_s * GIB), started_at=E)
        tracked(monitor, E + t, samples.now.values())
    return fake, helper, monitor


def test_a_job_certain_to_outgrow_its_share_is_restarted_larger_and_its_size_remembered(tmp_path):
    fake, helper, monitor = growing(tmp_path, per_s=0.3)
    ctx = round_of(MemoryWatch(), monitor, E + 24)
    job = fake.jobs[7]
    assert ctx.acted == {7} and job.state == "PENDING"
    shards = int(job.tres_per_node.rsplit(":", 1)[1])
    assert shards >= 2 and helper.store.remembered_size("grow") == shards
    assert "memory-restart" in job.admin_comment
    assert [e.job_id for e in events(helper, KIND)] == [7]


def test_a_job_well_inside_its_share_keeps_running(tmp_path):
    fake, helper, monitor = growing(tmp_path, per_s=0.0)
    ctx = round_of(MemoryWatch(), monitor, E + 24)
    assert ctx.acted == set() and fake.jobs[7].state == "RUNNING" and events(helper, KIND) == []


def test_shadow_mode_only_says_what_it_would_do(tmp_path):
    fake, helper, monitor = growing(tmp_path, per_s=0.3, mode="observe")
    MemoryWatch().round(context(monitor, E + 24))
    assert fake.jobs[7].state == "RUNNING" and fake.jobs[7].tres_per_node == "gres:shard:1"
    (event,) = events(helper, KIND)
    assert event.data.get("shadow") is True and helper.store.remembered_size("grow") is None
