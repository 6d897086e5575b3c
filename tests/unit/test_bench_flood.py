"""`gpupack bench flood`'s pure parts: the plan's checks, the partial requests (never whole ones),
and the arithmetic of its summary (phases of samples, percentiles, the client's counts)."""
import pytest

from slurm_plugin.bench.flood import (
    PARTIAL, ClientCounts, close_buckets, FloodError, FloodPlan, Sample, check_plan, percentile, split_phases,
    summarize_counts,
)
from slurm_plugin.helper.protocol import split_request


@pytest.mark.parametrize("plan, says", [
    (FloodPlan(connections=0), "connections"),
    (FloodPlan(connections=20001), "connections"),
    (FloodPlan(hold_s=0), "positive"),
    (FloodPlan(connect_s=-1), "positive"),
    (FloodPlan(settle_s=-1), "settle"),
    (FloodPlan(sample_s=0.6), "sampling interval"),
    (FloodPlan(sample_s=0), "sampling interval"),
    (FloodPlan(rate=-5), "rate"),
    (FloodPlan(user="root"), "not root"),
    (FloodPlan(user="no-such-user-here"), "no such user"),
])
def test_plans_that_cannot_run_are_refused(plan, says):
    with pytest.raises(FloodError, match=says):
        check_plan(plan)


def test_the_default_plan_is_a_thousand_connections_of_nobody():
    plan = FloodPlan()
    check_plan(plan)
    assert (plan.connections, plan.user, plan.sample_s) == (1000, "nobody", 0.5)


def test_partial_requests_are_never_whole():
    assert split_request(PARTIAL["helper"]) is None  # the helper waits for more, it does not refuse
    assert b"\n" not in PARTIAL["agent"]  # the agent reads up to a newline
    head = PARTIAL["link"]
    assert head.startswith(b"POST /v1/") and b"\r\n\r\n" not in head  # the HTTP head never ends


def test_samples_split_into_before_during_after():
    samples = [Sample(-1.0, 12, 100, 10), Sample(-0.5, 12, 110, 11), Sample(0.0, 20, 120, 20),
               Sample(2.0, 28, 150, 27), Sample(4.0, 14, 130, 13), Sample(4.5, 12, 125, 11)]
    phases = split_phases(samples, flood_s=4.0)
    assert (phases["before"].samples, phases["before"].threads_max, phases["before"].rss_kib_max) == (2, 12, 110)
    during = phases["during"]
    assert (during.samples, during.threads_max, during.threads_min, during.rss_kib_max, during.fds_max) == \
        (3, 28, 14, 150, 27)
    assert (phases["after"].samples, phases["after"].threads_max) == (1, 12)
    assert split_phases([], 1.0) == {"before": None, "during": None, "after": None}


def test_percentile_is_nearest_rank():
    assert percentile([], 0.5) is None
    assert percentile([3.0], 0.99) == 3.0
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) in (50.0, 51.0)
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile(list(reversed(values)), 0.0) == 1.0


def test_summary_of_the_clients_counts():
    counts = ClientCounts(attempts=1005, connected=1000, refused={"EAGAIN": 3, "ECONNREFUSED": 2},
                          closed_by_server=990, closed_with_answer=40,
                          close_after_s=[0.001] * 974 + [2.0] * 16, open_max=35, open_at_end=10,
                          answers={"a": 1, "b": 7, "c": 3, "d": 2, "e": 9, "f": 4}, seconds=20.04)
    got = summarize_counts(counts)
    assert got["refused_at_connect"] == {"EAGAIN": 3, "ECONNREFUSED": 2}
    assert (got["closed_after_s_p50"], got["closed_after_s_max"]) == (0.001, 2.0)
    assert list(got["answers"]) == ["e", "b", "f", "c", "d"]  # the five most frequent
    assert (got["connected"], got["closed_by_server"], got["open_at_end"], got["seconds"]) == (1000, 990, 10, 20.04)
    assert summarize_counts(ClientCounts())["closed_after_s_p50"] is None


def test_close_times_are_bucketed():
    got = close_buckets([0.0, 0.05, 0.1, 0.9, 2.0, 2.0, 10.0, 15.0, 30.0])
    assert got == {"<0.1s": 2, "0.1-1s": 2, "1-5s": 2, "5-15s": 1, ">=15s": 2}
    assert sum(close_buckets([]).values()) == 0
    assert summarize_counts(ClientCounts(close_after_s=[0.01, 2.0]))["closed_after"]["1-5s"] == 1
