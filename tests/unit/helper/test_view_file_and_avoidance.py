"""The watcher -> submit side cluster view file, and pair avoidance decided at submit time."""
from __future__ import annotations

import json
import os

import pytest

from packer.comment import parse
from packer.config import GIB, PackerConfig
from packer.fingerprint import fingerprint
from packer.placement import Running, submit_exclusion
from store.db import RunRecord, Store
from slurm_plugin.helper.cluster_view import NodeGpus, Snapshot
from slurm_plugin.helper.watches.tracks import submit_time_exclusion
from slurm_plugin.helper.monitor_settings import MonitorSettings
from slurm_plugin.helper.submit_service import SubmitService
from fixed_view import FixedView
from slurm_plugin.helper.view_file import PublishedView, publish, snapshot_from_doc, snapshot_to_doc


def snap(taken_at: float, busy: int = 0, running=()) -> Snapshot:
    return Snapshot(
        nodes=(NodeGpus("n1", frozenset({"MIXED"}), 2, frozenset(range(busy))), NodeGpus("n2", frozenset({"IDLE"}), 2)),
        pending_whole_gpu_jobs=0,
        taken_at=taken_at,
        running=tuple(running),
    )


def test_snapshot_round_trips_through_the_file_format():
    original = snap(12.5, busy=1, running=[Running(7, "abc", ("n1",), True), Running(8, None, ("n2", "n3"), False)])
    assert snapshot_from_doc(json.loads(json.dumps(snapshot_to_doc(original)))) == original


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_published_view_counts_reservations_until_a_newer_snapshot(tmp_path):
    path = tmp_path / "cluster-view.json"
    clock = Clock(100.0)
    view = PublishedView(path, max_age_s=30, clock=clock)
    assert view.view().idle_gpus == 1  # no file yet: the conservative answer
    publish(path, snap(100.0))
    assert view.view().idle_gpus == 4
    clock.now = 101.0
    view.reserve_whole_gpu()
    view.reserve_whole_gpu()
    assert view.view().idle_gpus == 2
    publish(path, snap(102.0, busy=2))  # taken after both reservations: they show as busy now
    assert view.view().idle_gpus == 2


def test_stale_or_broken_view_is_not_trusted(tmp_path):
    path = tmp_path / "cluster-view.json"
    clock = Clock(100.0)
    view = PublishedView(path, max_age_s=30, clock=clock)
    publish(path, snap(100.0))
    assert view.view().idle_gpus == 4
    clock.now = 131.0  # the watcher stopped publishing
    assert view.view().idle_gpus == 1 and view.snapshot() is None
    path.write_text("{not json")
    os.utime(path, ns=(1, 1))
    clock.now = 100.0
    assert view.view().idle_gpus == 4  # a broken file keeps the last good snapshot while it is fresh
    path.write_text(json.dumps({"format": 99}))
    assert view.view().idle_gpus == 4


def test_a_view_going_staler_is_said_once_until_a_fresh_one_comes(tmp_path, caplog):
    """Every decision reads the view: a stale one is warned about once, not once a decision (the
    age in the text changes each second), and again after a fresh view went stale anew."""
    path = tmp_path / "cluster-view.json"
    clock = Clock(100.0)
    view = PublishedView(path, max_age_s=30, clock=clock)
    publish(path, snap(100.0))
    caplog.set_level("WARNING", logger="slurm_plugin.helper.view_file")
    for now in (131.0, 132.0, 140.0, 200.0):
        clock.now = now
        assert view.snapshot() is None
    stale = [r for r in caplog.records if "s old (limit" in r.getMessage()]
    assert len(stale) == 1 and "31 s old" in stale[0].getMessage()
    publish(path, snap(200.0))
    assert view.snapshot() is not None
    clock.now = 240.0
    assert view.snapshot() is None
    assert len([r for r in caplog.records if "s old (limit" in r.getMessage()]) == 2


def test_submit_exclusion_keeps_one_gpu_node_or_gives_up():
    running = [Running(1, "a", ("n1",), True), Running(2, "a", ("n2",), False), Running(3, "b", ("n3",), True)]
    avoid = lambda x, y: {x, y} == {"a", "new"}  # noqa: E731
    assert submit_exclusion("new", running, avoid, ["n1", "n2", "n3"]) == {"n1"}  # n2: whole GPU, no sharing
    assert submit_exclusion("new", running, avoid, ["n1"]) is None
    assert submit_exclusion("other", running, avoid, ["n1"]) == frozenset()
    assert submit_exclusion(None, running, avoid, ["n1"]) == frozenset()


def packed_service(partners, partner_nodes=("n1", "n3")):
    """A known job, packed; `partners`: the store's lookup of the workloads it must never
    share a GPU with (a packed job of workload `p` runs on each of `partner_nodes`)."""
    store = Store()
    body = b"#!/bin/sh\ntrain\n"
    fp = fingerprint("alice", "t", body)
    store.record_run(RunRecord(1, fp, int(7.6 * GIB), 35.0))
    store.pairs.avoided_with = partners  # the store's lookup, as the test scripts it
    cfg = PackerConfig(mode="enforce", pack_only_when_no_idle_gpu=False)
    from packer.decision import ClusterView

    nodes = tuple(NodeGpus(n, frozenset({"MIXED"}), 1, frozenset({0})) for n in ("n1", "n2", "n3"))
    running = tuple(Running(10 + i, "p", (n,), True) for i, n in enumerate(partner_nodes))
    view = Snapshot(nodes=nodes, pending_whole_gpu_jobs=0, taken_at=0.0, running=running)
    service = SubmitService(lambda: cfg, store, FixedView(ClusterView(0), lambda: view))
    fields = {"user_name": b"alice", "name": b"t", "script": body, "tres_per_node": b"gres:gpu:1"}
    return service, fields, fp


def test_service_sends_the_nodes_to_avoid_and_records_them():
    seen = []
    service, fields, fp = packed_service(lambda f: seen.append(f) or {"p"})
    answer = service.answer(fields)
    assert seen == [fp]
    assert (answer.verdict, answer.rewrite, answer.exclude) == ("packed", "gres:shard:1", "n1,n3")
    assert answer.to_wire()["exclude"] == "n1,n3"
    assert parse(answer.admin_comment).fields["avoid"] == "n1,n3"
    assert submit_time_exclusion(answer.admin_comment) == {"n1", "n3"}


def test_service_keeps_the_job_whole_when_every_node_is_to_be_avoided():
    service, fields, _ = packed_service(lambda f: {"p"}, partner_nodes=("n1", "n2", "n3"))
    answer = service.answer(fields)
    assert (answer.verdict, answer.reason, answer.rewrite, answer.exclude) == ("exclusive", "avoid-pair", "", "")
    assert "reason=avoid-pair" in answer.admin_comment


def test_service_decides_without_avoidance_when_the_lookup_breaks():
    def broken(_fp):
        raise RuntimeError("database locked")

    service, fields, _ = packed_service(broken)
    answer = service.answer(fields)
    assert (answer.verdict, answer.exclude) == ("packed", "")


def test_monitor_rounds_stretch_with_a_long_queue():
    from slurm_plugin.helper.monitor import Monitor

    from slurm_plugin.helper.round_load import RoundLoad

    monitor = Monitor.__new__(Monitor)
    monitor.settings = MonitorSettings(interval_s=1.0, max_duty=0.25)
    monitor.load = RoundLoad(1.0)
    assert monitor.pause_after(0.2) == 0.8
    assert monitor.pause_after(3.0) == pytest.approx(0.6)  # one slow round after a quick one: paced by the quick one
    assert monitor.pause_after(3.0) == 9.0  # 3 s of squeue again: rounds take a quarter of the time
    assert monitor.pause_after(1.5) == 4.5
    assert monitor.pause_after(6.0) == 4.5  # follows the shorter of the last two
    assert monitor.pause_after(0.2) == 0.8  # back at once


def test_one_round_held_up_by_a_passing_stall_does_not_stretch_the_pause_after_it():
    """CI on 24.11: single rounds of 5 s (one Slurm command that waited) among rounds of 0.2 s; each
    stretched the pause to 15 s, and a job's out-of-memory end, held 20 s for the helper's next
    list, failed before it came."""
    from slurm_plugin.helper.monitor import Monitor
    from slurm_plugin.helper.round_load import RoundLoad

    monitor = Monitor.__new__(Monitor)
    monitor.settings = MonitorSettings(interval_s=1.0, max_duty=0.25)
    monitor.load = RoundLoad(1.0)
    cycles = [r + monitor.pause_after(r) for r in (0.2, 0.2, 5.0, 0.2, 0.2, 5.0, 0.2)]
    # the slow round's own length and a quick round's pause, not a pause of 15 s after it
    assert [round(c, 2) for c in cycles] == [1.0, 1.0, 5.6, 1.0, 1.0, 5.6, 1.0]


def test_a_slow_round_says_where_its_time_went(caplog):
    from slurm_plugin.helper.monitor import Monitor, RoundLaps

    now = [0.0]
    laps = RoundLaps(clock=lambda: now[0])
    for part, took in (("listing", 4.1), ("agents", 0.05), ("memory", 0.5), ("regroup", 0.2), ("steer", 0.3)):
        now[0] += took
        laps(part)
    now[0] += 0.4
    laps("memory")  # a part counted twice adds up
    assert laps.slowest() == "listing 4.1 s, memory 0.9 s, steer 0.3 s"
    assert RoundLaps(clock=lambda: 0.0).slowest() == ""
    from slurm_plugin.helper.round_load import RoundLoad

    monitor = Monitor.__new__(Monitor)
    monitor.settings = MonitorSettings(interval_s=1.0, max_duty=0.25)
    monitor.load = RoundLoad(1.0)
    with caplog.at_level("INFO", logger="slurm_plugin.helper.round_load"):
        monitor.pause_after(5.0, laps.slowest())
    assert ("a round took 5.0 s (listing 4.1 s, memory 0.9 s, steer 0.3 s; Slurm 0.0 s of it), one round every "
            "20.0 s instead of 1.0 s") in caplog.text


def test_a_stale_node_is_kept_off_packed_jobs_and_all_stale_keeps_them_whole():
    from slurm_plugin.helper.cluster_view import STALE, packing_exclusion
    from slurm_plugin.helper.slurm_poll import snapshot_from
    from slurm_plugin.slurm.model import Node

    running = (Running(1, "a", ("n1",), True),)
    fresh = snap(1.0, running=running)
    assert packing_exclusion(fresh, "new", set()) == frozenset()
    stale = Snapshot(nodes=(NodeGpus("n1", frozenset({"MIXED"}), 2), NodeGpus("n2", frozenset({"IDLE", STALE}), 2)),
                     pending_whole_gpu_jobs=0, taken_at=1.0, running=running)
    assert packing_exclusion(stale, "new", set()) == {"n2"}  # the stale node, though no partner runs there
    assert packing_exclusion(stale, "new", {"a"}) is None  # n1 avoided, n2 stale: nowhere to pack
    # the watcher marks the nodes the monitor reports stale, and the mark survives the view file
    view = snapshot_from([Node("n1", ("IDLE",)), Node("n2", ("IDLE",))], [], 1.0, {"n2": "agent down"})
    assert [STALE in n.states for n in snapshot_from_doc(json.loads(json.dumps(snapshot_to_doc(view)))).nodes] \
        == [False, True]


def test_with_the_loader_requests_take_the_prepared_snapshot_and_read_only_a_file_it_has_not(tmp_path):
    path = tmp_path / "cluster-view.json"
    clock = Clock(100.0)
    view = PublishedView(path, max_age_s=30, clock=clock)
    prepared: list[float] = []
    view.on_new_snapshot(lambda s: prepared.append(s.taken_at))
    view.on_new_snapshot(lambda s: 1 / 0)  # a failing preparation is logged; the snapshot still goes through
    publish(path, snap(100.0))
    view.start_loader(every_s=0.01)
    assert prepared == [100.0] and view.view().idle_gpus == 4  # the first one read before any request
    publish(path, snap(101.0, busy=2))
    for _ in range(500):  # the loader picks the new file up (a round counter, not a timed wait)
        if view.loads >= 2:
            break
        view._stop.wait(0.01)
    assert prepared == [100.0, 101.0] and view.view().idle_gpus == 2
    loads = view.loads
    for _ in range(20):  # the file unchanged: requests take what the loader prepared, never read it
        assert view.view().idle_gpus == 2
    assert view.loads == loads
    view.stop_loader()
    publish(path, snap(102.0, busy=1))  # the loader behind (here: gone): the request reads the newer file
    assert view.view().idle_gpus == 3 and view.taken_at() == 102.0 and prepared[-1] == 102.0
    clock.now = 140.0  # and the age is checked on every request
    assert view.snapshot() is None and view.view().idle_gpus == 1
