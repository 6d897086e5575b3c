"""The history watch on its own: a round hands each ended run it tracked to the one writer
(`RunInbox`, written off the round) and writes nothing itself; a run still going stays
tracked; a run without samples leaves no figures; a run the suite requeued is handed over
with what requeued it."""
from __future__ import annotations

from slurm_plugin.helper.watches.history import HistoryWatch
from slurm_plugin.slurm.fake import FAKE_EPOCH
from tests.unit.helper.rounds_support import GIB, make, running
from tests.unit.helper.watches.watch_support import context, tracked

E = float(FAKE_EPOCH)


def _ran(monitor, samples, job_id: int, mems_gib: tuple[int, ...]) -> None:
    for t, mem in enumerate(mems_gib):
        samples.put(job_id, E + t, mem=int(mem * GIB), started_at=E)
        tracked(monitor, E + t, samples.now.values())


def test_an_ended_run_goes_to_the_writer_with_its_peak_and_the_round_writes_nothing(tmp_path):
    fake, helper, samples, monitor = make(tmp_path, fixed_clock=True)
    running(fake, 7, fp="fpA", shards=2)
    _ran(monitor, samples, 7, (3, 6, 4))
    fake.jobs[7].state = "COMPLETED"
    HistoryWatch().round(context(monitor, E + 5))
    (seen,) = monitor.actions.finished_runs.take()
    assert seen.figures.job_id == 7 and seen.figures.peak_mem_bytes == 6 * GIB
    assert seen.fp[0] == "fpA" and seen.end.ended_by == ""
    assert 7 not in monitor.state.tracks
    assert helper.store.runs("fpA") == []  # only the finals thread writes


def test_a_run_still_going_stays_tracked_and_is_not_handed_over(tmp_path):
    fake, _, samples, monitor = make(tmp_path, fixed_clock=True)
    running(fake, 8, fp="fpB")
    _ran(monitor, samples, 8, (2, 2))
    HistoryWatch().round(context(monitor, E + 5))
    assert monitor.actions.finished_runs.take() == [] and 8 in monitor.state.tracks


def test_a_run_the_suite_requeued_is_handed_over_with_what_requeued_it(tmp_path):
    fake, _, samples, monitor = make(tmp_path, fixed_clock=True)
    running(fake, 9, fp="fpC")
    _ran(monitor, samples, 9, (5, 9))
    track = monitor.state.tracks.pop(9)
    monitor.state.requeued_tracks.append((track, "restart-oom"))
    fake.jobs[9].state = "PENDING"
    HistoryWatch().round(context(monitor, E + 5))
    (seen,) = monitor.actions.finished_runs.take()
    assert seen.figures.job_id == 9 and seen.end.ended_by == "restart-oom"
    assert monitor.state.requeued_tracks == []
