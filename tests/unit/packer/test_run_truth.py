"""Which finished runs are measurements and which are lower bounds."""
import pytest

from packer.run_truth import GAP_TOLERANCE_S, RunEnd, judge, sample_gaps


def test_only_a_completed_latest_run_without_gaps_is_a_measurement():
    assert not judge(RunEnd("COMPLETED")).lower_bound
    assert judge(RunEnd("COMPLETED", gaps_s=GAP_TOLERANCE_S)).why == "completed"


@pytest.mark.parametrize("end, why", [
    (RunEnd("CANCELLED"), "cancelled"),
    (RunEnd("FAILED"), "failed"),
    (RunEnd("OUT_OF_MEMORY"), "out of memory"),
    (RunEnd("TIMEOUT"), "timeout"),
    (RunEnd("NODE_FAIL"), "node fail"),
    (RunEnd("PENDING"), "requeued"),
    (RunEnd("COMPLETED", latest_run=False), "requeued (a later run started)"),
    (RunEnd("PENDING", ended_by="restart-memory"), "requeued by restart-memory"),
    (RunEnd("COMPLETED", gaps_s=42.0), "gaps 42s without samples"),
    (RunEnd("COMPLETED", gaps_s=None), "samples do not cover the run"),
    (RunEnd("GONE"), "ended unseen"),
])
def test_every_other_run_is_a_lower_bound(end, why):
    verdict = judge(end)
    assert verdict.lower_bound and verdict.why == why


def test_gaps_are_the_long_stretches_between_samples_and_after_the_last():
    assert sample_gaps([0.0, 1.0, 2.0, 3.0], end_at=4.0) == 0.0
    assert sample_gaps([0.0, 1.0, 31.0, 32.0], end_at=33.0) == 30.0
    assert sample_gaps([0.0, 1.0], end_at=21.0) == 20.0  # the agent went away before the end
    assert sample_gaps([0.0, 1.0], end_at=None) == 0.0
    assert sample_gaps([], end_at=5.0) == float("inf")
