import pytest

from predictor.restart import decide_restart

GIB = 1 << 30


def _d(**kw):
    base = dict(warn=True, now_s=42 * 60, checkpoint_s=0, crossing_s=56 * 60, end_s=120 * 60,
                predicted_peak_bytes=79.3 * GIB, capacity_bytes=80 * GIB)
    base.update(kw)
    return decide_restart(**base)


def test_certain_oom_before_the_end_restarts_and_prices_both_choices():
    d = _d()
    assert d.restart
    assert d.lose_now_s == 42 * 60 and d.lose_at_oom_s == 56 * 60
    assert d.reason == "restart: oom predicted in ~14 min at 79.3/80 GiB; restarting now loses 42 min, an OOM would lose 56 min"


def test_loss_counts_from_the_last_checkpoint():
    d = _d(checkpoint_s=30 * 60)
    assert d.lose_now_s == 12 * 60 and d.lose_at_oom_s == 26 * 60


def test_uncertain_forecast_keeps_the_job():
    d = _d(warn=False)
    assert not d.restart and "not certain" in d.reason


def test_job_that_ends_before_the_crossing_is_kept():
    d = _d(end_s=50 * 60)
    assert not d.restart and "ends before" in d.reason


def test_restart_that_cannot_land_before_the_oom_is_pointless():
    d = _d(restart_cost_s=20 * 60)
    assert not d.restart and "cannot land" in d.reason


def test_no_crossing_keeps():
    d = _d(crossing_s=None)
    assert not d.restart and d.lose_at_oom_s is None


def test_time_before_checkpoint_is_an_error():
    with pytest.raises(ValueError):
        _d(now_s=10, checkpoint_s=20)
