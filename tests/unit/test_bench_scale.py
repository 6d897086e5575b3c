"""The scale bench's arithmetic and parsing: sdiag as each release prints it (recorded), the
difference over a window, the suite's share, the ratios and the summary of two windows."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from slurm_plugin.bench import scale_figures as fig
from slurm_plugin.bench.scale import ScalePlan, lua_alone_figures, summarise, table
from slurm_plugin.bench.scale_cluster import Fill, scale_spec
from slurm_plugin.bench.scale_window import Window
from slurm_plugin.bench.submit import BenchError, shim_parts
from slurm_plugin.devcluster.spec import with_extra_lines

DATA = Path(__file__).parents[1] / "data" / "slurm"
RECORDED = sorted(DATA.glob("sdiag_*.txt"))


def test_every_release_is_recorded():
    assert {p.stem.split("_")[1] for p in RECORDED} >= {"22.05"}


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_recorded_sdiag_reads_whole(path):
    got = fig.parse_sdiag(path.read_text())
    assert got.unread == 0
    assert got.types["REQUEST_SUBMIT_BATCH_JOB"].count >= 5  # the recording's own submissions
    assert got.total_us == sum(s.total_us for s in got.types.values()) > 0
    # every RPC is some user's: the two sections count the same calls
    assert got.count == sum(s.count for s in got.users.values())


def test_sdiag_line_that_does_not_read_is_counted_not_guessed():
    text = ("Remote Procedure Call statistics by message type\n"
            "\tREQUEST_JOB_INFO                        ( 2003) count:10     ave_time:100    total_time:1000\n"
            "\tREQUEST_NODE_INFO ( 2007) count:ten ave_time:1 total_time:1\n"
            "\nPending RPC statistics\n\tNo pending RPCs\n")
    got = fig.parse_sdiag(text)
    assert got.types == {"REQUEST_JOB_INFO": fig.RpcStat(10, 1000)}
    assert got.unread == 1  # "No pending RPCs" is in a section it does not read


def test_delta_is_what_happened_in_between_and_a_reset_type_is_taken_as_it_reads():
    before = fig.Sdiag({"A": fig.RpcStat(10, 1000), "B": fig.RpcStat(50, 9000)})
    after = fig.Sdiag({"A": fig.RpcStat(15, 1600), "B": fig.RpcStat(3, 300), "C": fig.RpcStat(1, 7)})
    got = fig.rpc_delta(before, after)
    assert got.types == {"A": fig.RpcStat(5, 600), "B": fig.RpcStat(3, 300), "C": fig.RpcStat(1, 7)}


def test_share_is_the_extra_rpc_time_over_the_window():
    with_suite = fig.Sdiag({"A": fig.RpcStat(1, 3_000_000), "B": fig.RpcStat(1, 1_000_000)})
    without = fig.Sdiag({"A": fig.RpcStat(1, 2_800_000)})
    assert fig.share_pct(with_suite, without, 600) == pytest.approx(1.2 / 600 * 100)
    with pytest.raises(ValueError):
        fig.share_pct(with_suite, without, 0)


def test_ratio_and_percentiles_refuse_what_is_not_there():
    assert fig.ratio(2.0, 1.0) == 2.0
    assert math.isnan(fig.ratio(1.0, 0.0)) and math.isnan(fig.ratio(math.nan, 1.0))
    assert fig.percentile([3.0, 1.0, 2.0], 0.5) == 2.0 and fig.percentile(list(range(101)), 0.99) == 99
    assert math.isnan(fig.percentile([], 0.99)) and math.isnan(fig.median([]))


def test_prometheus_value_reads_one_series():
    text = ("# TYPE gpupack_monitor_rounds counter\ngpupack_monitor_rounds_total 42.0\n"
            "# TYPE x histogram\nx_bucket{le=\"1.0\"} 3.0\nx_bucket{le=\"+Inf\"} 4.0\nx_sum 2.5\nx_count 4.0\n")
    assert fig.prometheus_value(text, "gpupack_monitor_rounds_total") == 42.0
    assert fig.prometheus_value(text, "x_sum") == 2.5
    assert fig.prometheus_value(text, "missing") is None


def _window(suite: bool, rpcs: dict[str, tuple[int, int]], sbatch: float, squeue: float, **kw) -> Window:
    return Window(suite=suite, seconds=100.0, rpcs=fig.Sdiag({k: fig.RpcStat(*v) for k, v in rpcs.items()}),
                  sbatch_s=[sbatch] * 3, squeue_s=[squeue] * 3, scontrol_s=[0.01] * 3, **kw)


def test_summary_of_two_windows():
    without = _window(False, {"REQUEST_JOB_INFO": (100, 2_000_000)}, 0.050, 0.300)
    with_suite = _window(True, {"REQUEST_JOB_INFO": (200, 3_000_000), "REQUEST_NODE_INFO": (100, 500_000)}, 0.055, 0.330,
                         shim_ms=[1.0, 2.0, 9.0], submit_rss_mib=[100.0, 120.0], watcher_rss_mib=[150.0, 140.0],
                         watcher_start={"rounds": 10.0}, watcher_end={"rounds": 60.0},
                         watcher_samples=[{"round_s": 0.4, "cycle_s": 1.0, "query_s": 0.1},
                                          {"round_s": 0.5, "cycle_s": 1.0, "query_s": 0.2},
                                          {"round_s": 0.9, "cycle_s": 1.2, "query_s": 0.3}, {}])
    plan = ScalePlan(nodes=100, gpus_per_node=8, jobs=1000, window_s=100)
    got = summarise(plan, without, with_suite, [1.0, 3.0], Fill(1000, 50.0, 0), 6, 4096, "slurm 22.05.8", [1.0, 1.0])
    assert got.nodes == 103 and got.gpus == 806 and got.queued_jobs == 1000
    assert got.slurmctld_share_pct == pytest.approx(1.5)  # 1.5 s more over 100 s
    assert got.sbatch_latency_ratio == pytest.approx(1.1) and got.squeue_latency_ratio == pytest.approx(1.1)
    assert got.watcher_round_s == pytest.approx(0.5) and got.watcher_round_max_s == 0.9 and got.watcher_rounds == 50
    assert got.watcher_cycle_s == 1.0 and got.watcher_query_s == pytest.approx(0.2)
    assert got.submit_p50_ms == 2.0 and got.submit_p99_ms == 9.0
    assert got.helper_rss_mib == 270.0  # the largest of each process, together
    assert got.fill_rate_per_s == 20.0
    assert [r["rpc"] for r in got.rpcs] == ["REQUEST_JOB_INFO", "REQUEST_NODE_INFO"]
    assert "| slurmctld_share_pct | 1.5 |" in table(got.__dict__)


def test_without_a_round_time_series_the_round_is_the_mean_cycle_and_says_so():
    without = _window(False, {}, 0.05, 0.3)
    with_suite = _window(True, {}, 0.05, 0.3, watcher_start={"rounds": 1.0}, watcher_end={"rounds": 11.0})
    got = summarise(ScalePlan(window_s=100), without, with_suite, [], Fill(0, 1.0, 0), 0, 0, "v", [])
    assert got.watcher_round_s == pytest.approx(10.0)
    assert any("round and pause" in n for n in got.notes)


def test_the_lua_plugin_alone_is_told_apart_from_the_suite():
    """A third window with job_submit/lua on and a script that does nothing: what Slurm's plugin
    costs by itself, and what the suite adds on top of it."""
    without = _window(False, {"REQUEST_SUBMIT_BATCH_JOB": (50, 1_000_000)}, 0.010, 0.3)
    alone = _window(False, {"REQUEST_SUBMIT_BATCH_JOB": (50, 4_000_000)}, 0.040, 0.3)
    with_suite = _window(True, {"REQUEST_SUBMIT_BATCH_JOB": (50, 4_500_000)}, 0.044, 0.3)
    got = lua_alone_figures(without, alone, with_suite)
    assert got["lua_alone_sbatch_ratio"] == pytest.approx(4.0)
    assert got["lua_alone_share_pct"] == pytest.approx(3.0)  # 3 s more over 100 s
    assert got["sbatch_over_lua_alone_ratio"] == pytest.approx(1.1)
    assert got["share_over_lua_alone_pct"] == pytest.approx(0.5)
    result = summarise(ScalePlan(window_s=100), without, with_suite, [], Fill(0, 1.0, 0), 0, 0, "v", []).__dict__
    assert "lua_alone" not in table(result)
    result.update(got)
    assert "| lua_alone_sbatch_ratio | 4.0 |" in table(result)


def test_plan_refuses_what_cannot_be_measured():
    with pytest.raises(BenchError):
        ScalePlan(window_s=5).check()
    with pytest.raises(BenchError):
        ScalePlan(workers=0).check()


def test_scale_spec_adds_future_nodes_room_for_the_queue_and_a_sites_scheduler():
    spec = scale_spec(2000, 8, 50000, 7)
    assert "MaxJobCount=70000" in spec.extra_slurm_conf
    far = next(line for line in spec.extra_slurm_conf if line.startswith("NodeName="))
    assert "far[1-2000]" in far and "State=FUTURE" in far and "gpu:h100:8,shard:h100:56" in far
    assert not any(line.startswith("NodeName") for line in scale_spec(0, 8, 10, 7).extra_slurm_conf)


def test_extra_lines_replace_a_key_and_add_nodes():
    lines = ["SchedulerParameters=sched_interval=2", "MinJobAge=600", "NodeName=node1 CPUs=1"]
    got = with_extra_lines(lines, ["SchedulerParameters=bf_interval=30", "NodeName=far[1-2] State=FUTURE", "MaxJobCount=9"])
    assert got == ["SchedulerParameters=bf_interval=30", "MinJobAge=600", "NodeName=node1 CPUs=1",
                   "NodeName=far[1-2] State=FUTURE", "MaxJobCount=9"]


def test_shim_parts_reads_the_exchange_apart_and_old_lines_without_it():
    log = ("[2026-12-02T03:33:01.001] lua: gpupack: uid=0 verdict=exclusive reason=no-history mode=enforce fp=ab "
           "ask_ms=0.700 applied=comment elapsed_ms=0.800\n"
           "[2026-12-02T03:33:01.002] lua: gpupack: uid=0 verdict=exclusive reason=x mode=enforce fp=ab applied=comment "
           "elapsed_ms=1.500\n"
           "[2026-12-02T03:33:01.003] sched: Allocate JobId=5\n")
    assert shim_parts(log) == [(0.8, 0.7), (1.5, None)]


class FakeBenchCluster:
    """The bench cluster's Slurm commands, recorded; its registry names a slurmctld whose pid
    may no longer be the running one (``running()`` empty: it re-executed on a reconfigure)."""

    def __init__(self, registered: bool = True):
        import subprocess

        self.subprocess = subprocess
        self.calls: list[tuple[str, ...]] = []
        entry = [type("P", (), {"role": "slurmctld"})()] if registered else []
        self.registry = type("R", (), {"running": staticmethod(lambda: {}), "load": staticmethod(lambda: entry)})()

    def _slurm(self, *args: str, timeout: float = 15.0):
        self.calls.append(args)
        out = {"sinfo": "gpu\ndebug\ngpu\n", "scontrol": "Slurmctld(primary) at ctl is UP\n"}.get(args[0], "")
        return self.subprocess.CompletedProcess(args, 0, out if args[:2] != ("scontrol", "update") else "", "")


def test_a_teardown_asks_slurmctld_not_the_registry_whether_it_runs():
    """`scontrol reconfigure` (a window's switch) makes 23.11+ slurmctld start a new process of
    itself; a teardown right after found neither pid alive in the registry, cancelled nothing,
    and the re-executed slurmctld and the running jobs' steps outlived the bench (seen on 26.05)."""
    from slurm_plugin.bench.own_cluster import _end_jobs

    cluster = FakeBenchCluster()
    _end_jobs(cluster, timeout_s=5)
    assert ("scancel", "--full", "--state=RUNNING") in cluster.calls
    never = FakeBenchCluster(registered=False)  # a cluster whose slurmctld never started: nothing asked
    _end_jobs(never, timeout_s=5)
    assert never.calls == []


def test_own_cluster_stops_its_partitions_before_cancelling_the_running_jobs():
    """Cancelled running jobs free GPUs; the queued jobs must not start on them and outlive
    the cluster (seen at 20,000 queued jobs before the partitions were set DOWN first)."""
    from slurm_plugin.bench.own_cluster import _end_jobs

    cluster = FakeBenchCluster()
    _end_jobs(cluster, timeout_s=5)
    assert cluster.calls[0] == ("scontrol", "ping")
    verbs = [c[:3] if c[0] == "scontrol" else c[:1] for c in cluster.calls[1:]]
    assert verbs[:4] == [("sinfo",), ("scontrol", "update", "PartitionName=debug"),
                         ("scontrol", "update", "PartitionName=gpu"), ("scancel",)]
    assert all(c[-1] == "State=DOWN" for c in cluster.calls if c[:2] == ("scontrol", "update"))
    assert cluster.calls[-1][0] == "squeue"  # then waits for the running ones to end


def test_fill_stops_starting_submissions_when_its_time_is_up(monkeypatch):
    from slurm_plugin.bench import scale_cluster

    clock = iter(range(0, 10_000, 10))  # each look at the clock: 10 s later
    monkeypatch.setattr(scale_cluster.time, "perf_counter", lambda: float(next(clock)))
    submitted = []
    monkeypatch.setattr(scale_cluster, "sbatch", lambda env, args, script=b"": (submitted.append(args) or 0.01, 7, ""))
    fill = scale_cluster.fill_queue({}, jobs=20, workers=1, max_s=45)
    assert fill.jobs == len(submitted) and 0 < fill.jobs < 20
    assert fill.jobs + fill.not_started == 20 and fill.failed == 0
    unlimited = scale_cluster.fill_queue({}, jobs=5, workers=1)
    assert unlimited.jobs == 5 and unlimited.not_started == 0
