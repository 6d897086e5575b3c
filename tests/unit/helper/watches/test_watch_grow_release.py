"""The grow-release watch on its own: a victim left held goes back to the head of the queue
once its grower runs again, is gone, or has not started within `grow_hold_victims_s`; until
then it stays held."""
from __future__ import annotations

from slurm_plugin.helper.watches.grow_release import RELEASE_KIND, GrowReleaseWatch
from slurm_plugin.slurm.fake import FAKE_EPOCH
from tests.unit.helper.rounds_support import make
from tests.unit.helper.watches.watch_support import context, events

E = FAKE_EPOCH
HOLD_S = 120.0


def held(fake, monitor, victim: int, grower: int, since: float) -> None:
    fake.submit(job_id=victim, state="PENDING", priority=0, state_reason="JobHeldAdmin", restart_cnt=1)
    monitor.state.held_for_grower[victim] = (grower, since)


def test_a_victim_is_released_once_its_grower_runs_again(tmp_path):
    fake, helper, _, monitor = make(tmp_path, grow_hold_victims_s=HOLD_S)
    held(fake, monitor, 2, 1, E + 100)
    fake.submit(job_id=1, state="RUNNING", start_time=E + 50)  # its old run, still listed
    GrowReleaseWatch().round(context(monitor, E + 110))
    assert 2 in monitor.state.held_for_grower and fake.jobs[2].priority == 0

    fake.jobs[1].start_time = E + 105  # its new run, on the larger share
    GrowReleaseWatch().round(context(monitor, E + 110))
    assert monitor.state.held_for_grower == {}
    assert fake.jobs[2].priority > 0 and 2 in monitor.state.heading  # at the head, kept there
    (event,) = events(helper, RELEASE_KIND)
    assert event.job_id == 2 and "job 1 runs again" in event.detail and event.data["grower"] == 1


def test_a_victim_waits_for_a_pending_grower_only_so_long(tmp_path):
    fake, helper, _, monitor = make(tmp_path, grow_hold_victims_s=HOLD_S)
    held(fake, monitor, 2, 1, E + 100)
    fake.submit(job_id=1, state="PENDING", priority=900)
    GrowReleaseWatch().round(context(monitor, E + 100 + HOLD_S - 1))
    assert 2 in monitor.state.held_for_grower and events(helper, RELEASE_KIND) == []
    GrowReleaseWatch().round(context(monitor, E + 100 + HOLD_S + 1))
    assert monitor.state.held_for_grower == {}
    assert "did not start within 120s" in events(helper, RELEASE_KIND)[0].detail


def test_a_victim_whose_grower_is_gone_is_released_and_one_gone_itself_is_dropped(tmp_path):
    fake, helper, _, monitor = make(tmp_path, grow_hold_victims_s=HOLD_S)
    held(fake, monitor, 2, 1, E + 100)  # grower 1: not listed any more
    monitor.state.held_for_grower[3] = (1, E + 100)  # victim 3: not listed any more
    fake.submit(job_id=4, state="RUNNING", start_time=E + 101)  # released by someone else, running
    monitor.state.held_for_grower[4] = (1, E + 100)
    GrowReleaseWatch().round(context(monitor, E + 110))
    assert monitor.state.held_for_grower == {}
    assert [(e.job_id, "job 1 is gone" in e.detail) for e in events(helper, RELEASE_KIND)] == [(2, True)]
