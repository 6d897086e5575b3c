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
    assert d.reason.startswith(
        "restart: oom predicted in ~14 min at 79.3/80 GiB; restarting now loses 42 min, an OOM would lose 56 min; "
        "expected loss keeping it 55 min (p=0.99), restarting 42 min")
    assert d.expected_keep_s == pytest.approx(0.99 * 56 * 60) and d.expected_restart_s == 42 * 60


def test_loss_counts_from_the_last_checkpoint():
    d = _d(checkpoint_s=30 * 60)
    assert d.lose_now_s == 12 * 60 and d.lose_at_oom_s == 26 * 60


def test_uncertain_forecast_keeps_the_job():
    d = _d(warn=False)
    assert not d.restart and "not certain" in d.reason


def test_job_that_ends_before_the_crossing_is_kept():
    d = _d(end_s=50 * 60)
    assert not d.restart and "ends before" in d.reason


def test_restart_cost_is_paid_either_way():
    """An OOM fails the job, which must start again too: a slow restart is no reason to wait."""
    assert _d(restart_cost_s=20 * 60).restart


def test_a_near_crossing_that_is_only_probable_keeps_a_long_job():
    # 10 h of work, OOM in 2 min with p=0.9: keeping loses 0.9*(602+5) min, restarting 605 min
    d = _d(now_s=600 * 60, crossing_s=602 * 60, end_s=None, restart_cost_s=5 * 60, p_oom=0.9)
    assert not d.restart and "costs less than a restart" in d.reason
    assert d.expected_keep_s < d.expected_restart_s
    # the same job with the OOM certain restarts
    assert _d(now_s=600 * 60, crossing_s=602 * 60, end_s=None, restart_cost_s=5 * 60, p_oom=1.0).restart


def test_a_far_crossing_restarts_at_once():
    d = _d(now_s=60, crossing_s=60 * 60, end_s=None, p_oom=0.9)
    assert d.restart and d.expected_keep_s > d.expected_restart_s


def test_the_failure_penalty_tips_a_near_crossing_towards_a_restart():
    kw = dict(now_s=600 * 60, crossing_s=602 * 60, end_s=None, restart_cost_s=5 * 60, p_oom=0.9)
    assert not _d(**kw).restart
    d = _d(**kw, oom_penalty_s=120 * 60)  # the user notices and resubmits two hours later
    assert d.restart and "failure 120 min" in d.reason


@pytest.mark.parametrize("kw", [dict(p_oom=0.0), dict(p_oom=1.5), dict(restart_cost_s=-1), dict(oom_penalty_s=-1)])
def test_bad_arguments_are_errors(kw):
    with pytest.raises(ValueError):
        _d(**kw)


def test_no_crossing_keeps():
    d = _d(crossing_s=None)
    assert not d.restart and d.lose_at_oom_s is None


def test_time_before_checkpoint_is_an_error():
    with pytest.raises(ValueError):
        _d(now_s=10, checkpoint_s=20)
