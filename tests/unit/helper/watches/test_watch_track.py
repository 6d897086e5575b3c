"""The tracks watch on its own: a running job's samples make its track, an old sample is not
added twice, a job not running has none, and a new run of a requeued job starts over (the
earlier run handed to `on_run_ended`)."""
from __future__ import annotations

from slurm_plugin.helper.watches.track_watch import TrackWatch
from slurm_plugin.slurm.fake import FAKE_EPOCH
from tests.unit.helper.rounds_support import Samples, make, running
from tests.unit.helper.watches.watch_support import context

E = float(FAKE_EPOCH)


def sample(job_id: int, at: float, **kw):
    samples = Samples()
    samples.put(job_id, at, **kw)
    return samples.now[job_id]


def test_a_running_jobs_samples_make_its_track_and_a_new_run_starts_over(tmp_path):
    fake, _, _, monitor = make(tmp_path)
    running(fake, 1, fp="fp-a", shards=3)
    fake.submit(job_id=2, state="PENDING", gres="gres:shard:2")
    ended = []
    watch = TrackWatch(on_run_ended=lambda ctx, track, state: ended.append((track.job_id, track.started_at, state)))

    first = sample(1, E + 10)
    watch.round(context(monitor, E + 10, [first, sample(2, E + 10), sample(3, E + 10)]))
    assert set(monitor.tracks) == {1}  # job 2 pends, job 3 is not Slurm's
    track = monitor.tracks[1]
    assert (track.fingerprint, track.shards, track.node, track.started_at) == ("fp-a", 3, "node1", E)
    assert list(track.samples) == [first]

    watch.round(context(monitor, E + 20, [first]))  # the agent's newest is still that one
    assert list(track.samples) == [first]
    second = sample(1, E + 20, isolation="shard:3")
    watch.round(context(monitor, E + 20, [second]))
    assert list(track.samples) == [first, second] and track.isolation == "shard:3" and track.last_state == "RUNNING"
    assert ended == []

    again = sample(1, E + 100, started_at=E + 90)  # requeued between two rounds, running again
    watch.round(context(monitor, E + 100, [again]))
    assert ended == [(1, E, "REQUEUED")]
    assert monitor.tracks[1] is not track and list(monitor.tracks[1].samples) == [again]
