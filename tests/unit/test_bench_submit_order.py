"""The submit benchmark's block order (ABBA, so a drift over the run falls on both sides),
its room check, and the figures it derives from block times."""
import math

import pytest

from slurm_plugin.bench.submit import block_order, mean_interval


def test_blocks_are_balanced_abba():
    order = block_order(4)
    assert order == [True, False, False, True, True, False, False, True]
    # the mean position of each configuration is the same: a linear drift cancels
    pos = {flag: sum(i for i, f in enumerate(order) if f == flag) for flag in (True, False)}
    assert pos[True] == pos[False]
    assert block_order(1) == [True, False]


class _FakeCluster:
    """Answers the two queries the room check makes (an error path: no controller needed)."""

    def __init__(self, records: int, limit: str = "10000"):
        self.records, self.limit = records, limit

    def _slurm(self, *args):
        import subprocess

        if args[:2] == ("scontrol", "show"):
            out = f"MaxJobCount             = {self.limit}\nMinJobAge               = 600 sec\n"
        else:
            out = "\n".join(str(i) for i in range(self.records))
        return subprocess.CompletedProcess(args, 0, out, "")


def test_a_run_that_would_overflow_the_job_table_is_refused_up_front():
    from slurm_plugin.bench.submit import BenchError, check_job_table_room

    check_job_table_room(_FakeCluster(records=100), needed=9900)  # exactly fits
    with pytest.raises(BenchError, match=r"holds 101 job records .* MaxJobCount=10000; .* MinJobAge \(600 s\)"):
        check_job_table_room(_FakeCluster(records=101), needed=9900)
    check_job_table_room(_FakeCluster(records=10**6, limit="unknown"), needed=1)  # unreadable limit: no check


def test_each_abba_pair_gets_its_own_ratio():
    from slurm_plugin.bench.submit import pair_ratios

    # with 2.0 s / without 1.8 s, then without 1.0 s / with 1.25 s
    assert pair_ratios([(True, 2.0), (False, 1.8), (False, 1.0), (True, 1.25)]) == [0.9, 0.8]
    assert pair_ratios([(True, 2.0)]) == []  # an unpaired round is not a ratio


def test_the_interval_over_pairs_is_a_t_interval():
    mean, low, high = mean_interval([0.9, 1.0, 1.1])
    assert mean == pytest.approx(1.0)
    # t(0.975, 2) = 4.303; sd = 0.1; sqrt(3): half-width 0.2484
    assert (low, high) == (pytest.approx(1.0 - 0.2484, abs=1e-4), pytest.approx(1.0 + 0.2484, abs=1e-4))
    mean, low, high = mean_interval([0.95])
    assert mean == 0.95 and math.isnan(low) and math.isnan(high)
