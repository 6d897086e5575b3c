"""Contention, head-of-queue priority and restart size (packer/preemption.py)."""
from __future__ import annotations

import pytest

from packer.contention import Resident, find_contention, measure_seniors, throughput_loss
from packer.preemption import END, FORGET, KEEP, MAX_NICE, WAIT, Lift, head_nice, lift_turn, restart_size

GIB = 1024**3


def series(start: float, stop: float, value: float, step: float = 1.0) -> tuple[tuple[float, float], ...]:
    out, t = [], start
    while t < stop:
        out.append((t, value))
        t += step
    return tuple(out)


def test_loss_compares_before_and_after_the_newcomer():
    samples = series(0, 10, 20.0) + series(10, 20, 15.0)
    loss, before, after = throughput_loss(samples, since=10, settle_s=2)
    assert before == 20.0 and after == 15.0
    assert loss == pytest.approx(0.25)


def test_loss_is_unknown_until_both_sides_have_samples():
    assert throughput_loss(series(0, 10, 20.0), since=10) is None
    assert throughput_loss(series(9, 14, 20.0), since=10, settle_s=2, min_before=2) is None


def test_newcomer_that_slows_a_senior_beyond_threshold_is_preempted():
    senior = Resident(1, 0.0, series(0, 10, 20.0) + series(10, 20, 16.0), "fpA")
    newcomer = Resident(2, 10.0, series(10, 20, 30.0), "fpB")
    verdict = find_contention([newcomer, senior], threshold=0.10)
    assert verdict is not None and verdict.newcomer == 2 and verdict.newcomer_fingerprint == "fpB"
    assert [h.job_id for h in verdict.hurt] == [1]
    assert "lost 20%" in verdict.reason and "job 2" in verdict.reason


def test_slowdown_within_threshold_is_tolerated():
    senior = Resident(1, 0.0, series(0, 10, 20.0) + series(10, 20, 18.5))
    newcomer = Resident(2, 10.0)
    assert find_contention([senior, newcomer], threshold=0.10) is None


def test_only_the_newest_job_is_preempted_per_round():
    a = Resident(1, 0.0, series(0, 30, 20.0, 1) [:10] + series(10, 30, 10.0))
    b = Resident(2, 10.0, series(10, 30, 10.0))
    c = Resident(3, 20.0, series(20, 30, 10.0))
    verdict = find_contention([a, b, c], threshold=0.10)
    # a lost nothing relative to before c (10 -> 10) and b lost nothing: c is innocent
    assert verdict is None
    a2 = Resident(1, 0.0, series(0, 20, 20.0) + series(20, 30, 10.0))
    verdict = find_contention([a2, b, c], threshold=0.10)
    assert verdict is not None and verdict.newcomer == 3


def test_single_job_is_never_contended_and_bad_threshold_is_refused():
    assert find_contention([Resident(1, 0.0, series(0, 10, 1.0))]) is None
    with pytest.raises(ValueError):
        find_contention([], threshold=1.5)


def test_head_nice_lifts_the_job_one_above_every_pending_job():
    # priority/basic figures: the job at 4294901000 (nice 0), the highest pending one 1759 above
    assert head_nice(4294901000, 0, [4294902759, 4294901700, None, 0]) == -1760
    # priority/multifactor figures, with the user's own nice of 50 kept in the sum
    assert head_nice(900, 50, [1200, 1000]) == 50 - 301
    assert head_nice(900, 0, []) is None  # nothing to pass
    assert head_nice(900, 0, [0]) is None  # a held job does not count


def test_head_nice_does_not_climb_when_already_at_the_head_and_stays_in_slurms_range():
    assert head_nice(4294901800, -900, [4294901759]) is None
    assert head_nice(1, 0, [4294901759]) == -MAX_NICE


def test_a_lift_is_kept_while_pending_and_ends_when_the_job_starts():
    lifted = Lift(own_nice=50, nice=-400, restart_cnt=1)
    assert lift_turn(lifted, "PENDING", 1, 900) == KEEP
    assert lift_turn(lifted, "RUNNING", 1, 900) == END
    assert lift_turn(lifted, "CONFIGURING", 1, 0) == END
    assert lift_turn(lifted, "COMPLETING", 1, 900) == WAIT  # its old run is still being cleaned up
    assert lift_turn(lifted, "PENDING", 1, 0) == WAIT  # held: its owner or an administrator releases it
    assert lift_turn(lifted, None, None, None) == FORGET  # finished or gone


def test_a_lift_ends_when_the_job_ran_since_it_though_no_start_was_seen():
    """A restart count past the lift's: the job started and was requeued again (by Slurm,
    while no helper watched); a count Slurm did not give changes nothing."""
    assert lift_turn(Lift(0, -10, 1), "PENDING", 2, 900) == END
    assert lift_turn(Lift(0, -10, None), "PENDING", 2, 900) == KEEP
    assert lift_turn(Lift(0, -10, 1), "PENDING", None, 900) == KEEP


def test_restart_size_grows_to_what_the_forecast_needs():
    share = 10 * GIB
    assert restart_size(1, 14 * GIB, share, 7).shards == 2
    assert restart_size(2, 5 * GIB, share, 7).shards == 3  # always at least one more
    assert restart_size(2, 30 * GIB, share, 7, partition_shards=(1, 2, 4, 8)).shards == 4


def test_restart_size_falls_back_to_the_whole_gpu():
    size = restart_size(4, 75 * GIB, 10 * GIB, 7)
    assert size.whole_gpu and "whole GPU" in size.reason


def test_every_measured_senior_is_returned_hurt_or_not_and_the_verdict_is_unchanged():
    hurt = Resident(1, 0.0, series(0, 10, 20.0) + series(10, 20, 15.0), "fpA")
    fine = Resident(2, 1.0, series(1, 10, 10.0) + series(10, 20, 9.8), "fpB")
    early = Resident(4, 9.5, series(9.5, 10, 5.0) + series(10, 20, 5.0), "fpD")  # one sample before: unmeasured
    newcomer = Resident(3, 10.0, series(10, 20, 30.0), "fpC")
    pack = measure_seniors([hurt, fine, early, newcomer], settle_s=2)
    assert pack is not None and pack.newcomer is newcomer
    speeds = {m.job_id: (m.fingerprint, round(m.speed, 3), m.signal) for m in pack.seniors}
    assert speeds == {1: ("fpA", 0.75, "throughput"), 2: ("fpB", 0.98, "throughput")}
    verdict = find_contention([hurt, fine, early, newcomer], threshold=0.10, settle_s=2)
    assert verdict is not None and verdict.newcomer == 3 and [h.job_id for h in verdict.hurt] == [1]
    assert measure_seniors([hurt]) is None
    # a newcomer beside seniors that are not hurt: measured all the same, no verdict
    assert find_contention([fine, newcomer], threshold=0.10, settle_s=2) is None
    (only,) = measure_seniors([fine, newcomer], settle_s=2).seniors
    assert only.speed == pytest.approx(0.98)
