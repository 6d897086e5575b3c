"""The contention watch on its own: from the tracks of two packed jobs on one GPU, a newcomer that
costs its senior more than the tolerated share of its speed is requeued at the head and the pair
is kept apart; a measured senior's speed beside the newcomer is recorded once; a small loss, or
the `off` mode, requeues nothing."""
from __future__ import annotations

from slurm_plugin.helper.watches.contention import KIND, ContentionWatch
from slurm_plugin.slurm.fake import FAKE_EPOCH
from tests.unit.helper.rounds_support import make, running
from tests.unit.helper.watches.watch_support import context, events, round_of, tracked

E = float(FAKE_EPOCH)


def pack(tmp_path, senior_after: float, **settings):
    """Job 1 alone at 20 it/s for 10 s, then job 2 joins its GPU and job 1 runs at `senior_after`."""
    fake, helper, samples, monitor = make(tmp_path, fixed_clock=True, **settings)
    running(fake, 1, fp="aaaa", start=FAKE_EPOCH)
    for t in range(10):
        samples.put(1, E + t, throughput=20.0, started_at=E)
        tracked(monitor, E + t, samples.now.values())
    running(fake, 2, fp="bbbb", start=FAKE_EPOCH + 10)
    for t in range(10, 16):
        samples.put(1, E + t, throughput=senior_after, started_at=E)
        samples.put(2, E + t, throughput=30.0, started_at=E + 10)
        tracked(monitor, E + t, samples.now.values())
    return fake, helper, monitor


def test_a_newcomer_that_slows_its_senior_past_the_threshold_is_requeued_and_the_pair_kept_apart(tmp_path):
    fake, helper, monitor = pack(tmp_path, senior_after=15.0)
    ctx = round_of(ContentionWatch(), monitor, E + 16)
    assert ctx.acted == {2}
    assert fake.jobs[2].state == "PENDING" and "node1" in fake.jobs[2].excluded_nodes
    assert fake.jobs[1].state == "RUNNING"  # the senior is never touched
    assert helper.store.pairs.must_avoid("aaaa", "bbbb")
    (event,) = events(helper, KIND)
    assert event.job_id == 2 and "lost 25%" in event.detail
    (speed,) = helper.store.pairs.pair_speeds().values()
    assert (speed.fp_a, speed.fp_b, speed.samples) == ("aaaa", "bbbb", 1) and abs(speed.speed - 0.75) < 1e-9


def test_a_loss_within_the_threshold_is_measured_and_tolerated(tmp_path):
    fake, helper, monitor = pack(tmp_path, senior_after=19.0)  # 5 % < 10 %
    watch = ContentionWatch()
    ctx = context(monitor, E + 16)
    watch.round(ctx)
    watch.round(context(monitor, E + 16))  # the same pack: its measure is not counted twice
    assert ctx.acted == set() and fake.jobs[2].state == "RUNNING" and events(helper, KIND) == []
    assert not helper.store.pairs.must_avoid("aaaa", "bbbb")
    assert [p.samples for p in helper.store.pairs.pair_speeds().values()] == [1]


def test_the_off_mode_requeues_nothing(tmp_path):
    fake, helper, monitor = pack(tmp_path, senior_after=15.0)
    monitor.actions.modes = {KIND: "off"}
    ContentionWatch().round(context(monitor, E + 16))
    assert fake.jobs[2].state == "RUNNING" and events(helper, KIND) == []
    assert not helper.store.pairs.must_avoid("aaaa", "bbbb")
