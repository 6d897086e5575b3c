"""The out-of-memory end of a packed job and its retry (packer.oom_restart)."""
from __future__ import annotations

import pytest

from packer.oom_restart import OomEvidence, OomRetryLimits, decide_oom_restart, judge_oom_retry, oom_end

GIB = 1024**3
SHARE = 10 * GIB


def jump(exit_code: int = 1) -> OomEvidence:
    """5 GiB held, 10 GiB more asked for in a 10 GiB share (the issue's job)."""
    return OomEvidence(exit_code, limit_bytes=10 * GIB, peak_bytes=5 * GIB, asked_bytes=10 * GIB, held_bytes=5 * GIB)


def test_a_failed_allocation_past_the_share_with_a_nonzero_exit_is_an_oom_end():
    assert "allocation of 10.00GiB failed with 5.00GiB held" in oom_end(jump())


def test_a_clean_exit_is_never_an_oom_end_even_at_the_limit():
    assert oom_end(OomEvidence(0, 10 * GIB, 10 * GIB)) is None
    assert oom_end(OomEvidence(0, 10 * GIB, 5 * GIB, 10 * GIB, 5 * GIB)) is None


def test_a_nonzero_exit_far_below_the_limit_without_a_report_is_not_an_oom_end():
    assert oom_end(OomEvidence(1, 10 * GIB, 5 * GIB)) is None


def test_a_silent_job_that_failed_with_its_memory_at_the_limit_is_an_oom_end():
    assert "at its 10.00GiB share" in oom_end(OomEvidence(1, 10 * GIB, 9.8 * GIB))


def test_a_failed_allocation_that_fitted_the_share_is_not_the_shares_doing():
    assert oom_end(OomEvidence(1, 10 * GIB, 2 * GIB, asked_bytes=1 * GIB, held_bytes=2 * GIB)) is None


def test_the_jump_goes_to_the_next_size_that_holds_what_it_asked_for():
    d = decide_oom_restart(jump(), shards=1, share_bytes=SHARE, max_shards=7)
    assert d.requeue and d.shards == 2 and not d.whole_gpu
    assert d.need_bytes == 15 * GIB and d.lower_bound_bytes == 5 * GIB  # the peak: a bound, not the size
    assert "shard:2" in d.reason


def test_the_measured_curves_forecast_and_the_remembered_size_raise_the_size():
    assert decide_oom_restart(jump(), shards=1, share_bytes=SHARE, max_shards=7, forecast_bytes=33 * GIB).shards == 4
    assert decide_oom_restart(jump(), shards=1, share_bytes=SHARE, max_shards=7, remembered_shards=3).shards == 3


def test_a_silent_oom_at_the_limit_goes_at_least_one_share_up():
    d = decide_oom_restart(OomEvidence(1, 20 * GIB, 19.9 * GIB), shards=2, share_bytes=SHARE, max_shards=7)
    assert d.requeue and d.shards == 3


def test_past_the_largest_packed_size_it_needs_a_whole_gpu_or_stays_failed_where_slurm_cannot():
    big = OomEvidence(1, 70 * GIB, 60 * GIB, asked_bytes=20 * GIB, held_bytes=60 * GIB)
    assert decide_oom_restart(big, shards=7, share_bytes=SHARE, max_shards=7).whole_gpu
    kept = decide_oom_restart(big, shards=7, share_bytes=SHARE, max_shards=7, whole_gpu_allowed=False)
    assert not kept.requeue and "left FAILED" in kept.reason and "whole GPU" in kept.reason


@pytest.mark.parametrize("kw, words", [
    (dict(job_retries=2), "limit 2 per job"),
    (dict(workload_retries=4), "limit 4"),
    (dict(requeueable=False), "--no-requeue"),
])
def test_retries_are_capped_and_a_job_that_may_not_be_requeued_stays_failed(kw, words):
    d = decide_oom_restart(jump(), shards=1, share_bytes=SHARE, max_shards=7, limits=OomRetryLimits(2, 4), **kw)
    assert not d.requeue and words in d.reason and "left FAILED" in d.reason


def test_an_end_that_is_not_an_oom_is_never_requeued():
    d = decide_oom_restart(OomEvidence(3, 10 * GIB, 1 * GIB), shards=1, share_bytes=SHARE, max_shards=7)
    assert not d.requeue and d.reason == "not an out-of-memory end in its share"


def test_bad_evidence_is_refused():
    with pytest.raises(ValueError):
        OomEvidence(1, 0, 1)
    with pytest.raises(ValueError):
        OomEvidence(1, 10, -1)


@pytest.mark.parametrize("mode, end, outcome", [
    ("enforce", "COMPLETED", "right"), ("enforce", "FAILED", "wrong"), ("enforce", "CANCELLED", "unknown"),
    ("shadow", "FAILED", "right"), ("shadow", "OUT_OF_MEMORY", "right"), ("shadow", "COMPLETED", "wrong"),
])
def test_a_decision_is_judged_by_how_the_job_then_ended(mode, end, outcome):
    assert judge_oom_retry(mode, end)[0] == outcome
    assert judge_oom_retry(mode, None) is None


def test_the_node_measuring_the_limit_lifts_the_job_the_jobs_word_does_not():
    """Issue 33: what a job says of itself earns a retry at its own place, never a lift."""
    from packer.oom_restart import MEASURED, REPORTED, oom_basis

    measured = OomEvidence(1, 10 * GIB, 9.9 * GIB)
    reported = jump()
    assert oom_basis(measured) == MEASURED and oom_basis(reported) == REPORTED
    assert oom_basis(OomEvidence(1, 10 * GIB, 5 * GIB)) is None
    m = decide_oom_restart(measured, shards=1, share_bytes=SHARE, max_shards=7)
    r = decide_oom_restart(reported, shards=1, share_bytes=SHARE, max_shards=7)
    assert (m.requeue, m.at_head, m.evidence) == (True, True, MEASURED) and "at the head" in m.reason
    assert (r.requeue, r.at_head, r.evidence) == (True, False, REPORTED) and "own place" in r.reason
    # a report that also finds the job measured at its limit rests on the measurement
    both = OomEvidence(1, 10 * GIB, 9.8 * GIB, asked_bytes=4 * GIB, held_bytes=9.8 * GIB)
    assert decide_oom_restart(both, shards=1, share_bytes=SHARE, max_shards=7).at_head
    # what it held when it said so is read from the GPU too: at the limit, it is measured
    held_full = OomEvidence(1, 10 * GIB, 5 * GIB, asked_bytes=1 * GIB, held_bytes=9.7 * GIB)
    assert oom_basis(held_full) == MEASURED


def test_an_output_that_names_no_size_asks_for_the_next_size_up_on_its_word():
    said = OomEvidence(1, 10 * GIB, 1 * GIB, said_oom=True)
    assert "no size" in oom_end(said)
    d = decide_oom_restart(said, shards=1, share_bytes=SHARE, max_shards=7)
    assert d.requeue and not d.at_head and d.shards == 2
    assert oom_end(OomEvidence(0, 10 * GIB, 1 * GIB, said_oom=True)) is None  # it ended well


def test_the_jobs_word_is_capped_like_the_rest():
    d = decide_oom_restart(OomEvidence(1, 10 * GIB, 0, said_oom=True), shards=1, share_bytes=SHARE, max_shards=7,
                           job_retries=2)
    assert not d.requeue and "limit 2 per job" in d.reason
