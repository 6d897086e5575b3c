"""The agents' final summaries reach the controller's history: the sweep, the collector the
controller's epilog wakes, and the rules they record by."""
from __future__ import annotations

import json
import os
import time

import pytest

from store.db import Store
from slurm_plugin.agent.paths import final_path
from slurm_plugin.helper.finals import EndedSpool, FinalsCollector, FinalsSweep, LocalFinals
from slurm_plugin.history_recorder import (MERGED, NOT_FINISHED, RECORDED, UNATTRIBUTED, HistoryRecorder,
                                           RunFigures)
from slurm_plugin.slurm.fake import FAKE_EPOCH, FakeSlurm
from slurm_plugin.slurm.runner import SlurmRunner

from tests.unit.helper import rounds_support
from tests.unit.helper.rounds_support import GIB, running

START = FAKE_EPOCH + 1.5  # the agent's start of the run: a little after Slurm's


def summary(job_id, peak_gib=3.0, *, started_at=START, gaps=0.0, node="node1", **more) -> dict:
    out = {"job_id": job_id, "node": node, "gpu_index": 0, "isolation": "mig:1g.20gb@0", "shards": 2,
           "workload": None, "peak_mem_bytes": int(peak_gib * GIB), "mean_util_pct": 40.0,
           "mean_throughput": 5.0, "iterations": 10, "samples": 30, "started_at": started_at,
           "ended_at": started_at + 30, "end_reason": "batch step ended", "rejected_reports": 0, "gaps": gaps}
    out.update(more)
    if out["gaps"] is None:
        del out["gaps"]
    return out


def leave(tmp_path, s: dict) -> None:
    """The agent of `s`'s node writes its final summary (as `agent.daemon` does)."""
    path = final_path(tmp_path, s["node"], s["job_id"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(s))


@pytest.fixture
def world(tmp_path):
    fake = FakeSlurm()
    store = Store(tmp_path / "gpupack.db")
    sweep = FinalsSweep(LocalFinals(tmp_path), HistoryRecorder(store, SlurmRunner(executor=fake), "sweep"))
    return fake, store, sweep, tmp_path


def ended(fake, job_id, state="COMPLETED", fp="fp1", start=FAKE_EPOCH):
    running(fake, job_id, fp=fp, start=start)
    fake.jobs[job_id].state, fake.jobs[job_id].end_time = state, start + 31


def test_a_completed_run_is_recorded_once_however_often_it_is_swept(world):
    fake, store, sweep, tmp = world
    ended(fake, 5)
    leave(tmp, summary(5))
    assert sweep.sweep(["node1", "node2"]) == {5: RECORDED}
    (run,) = store.runs("fp1")
    assert (run.peak_mem_bytes, run.lower_bound, run.source, run.started_at) == (3 * GIB, False, "sweep", START)
    assert run.ended_at == START + 30  # when the run ended, not when it was swept
    assert sweep.sweep(["node1"]) == {}  # acknowledged: not collected again
    sweep.source = LocalFinals(tmp)  # nor by a restarted watcher
    assert sweep.sweep(["node1"]) == {}
    final_path(tmp, "node1", 5).with_suffix(".acked").unlink()  # an acknowledgement lost: merged, not recorded twice
    assert sweep.sweep(["node1"]) == {5: MERGED}
    assert len(store.runs("fp1")) == 1 and [e.kind for e in store.events()] == ["history"]
    leave(tmp, summary(5, started_at=START + 100))  # the agent writes the job's next run's summary
    acked = final_path(tmp, "node1", 5).with_suffix(".acked").stat().st_mtime
    os.utime(final_path(tmp, "node1", 5), (acked + 1, acked + 1))  # written after the acknowledgement
    assert 5 in sweep.sweep(["node1"])


@pytest.mark.parametrize("state, gaps, why", [
    ("COMPLETED", 45.0, "gaps 45s without samples"),  # the agent was down 45 s of it
    ("COMPLETED", None, "samples do not cover the run"),  # an agent that does not count its gaps
    ("CANCELLED", 0.0, "cancelled"),
    ("FAILED", 0.0, "failed"),
    ("OUT_OF_MEMORY", 0.0, "out of memory"),
])
def test_runs_that_do_not_tell_the_whole_truth_are_lower_bounds(world, state, gaps, why):
    fake, store, sweep, tmp = world
    ended(fake, 5, state)
    leave(tmp, summary(5, 5.0, gaps=gaps))
    assert sweep.sweep(["node1"]) == {5: RECORDED}
    (run,) = store.runs("fp1")
    assert run.lower_bound and run.end_state == why and run.peak_mem_bytes == 5 * GIB
    est = store.estimate("fp1")
    assert est.source == "lower-bound" and not est.measured


def test_the_summary_of_an_earlier_run_of_a_requeued_job_is_a_lower_bound(world):
    fake, store, sweep, tmp = world
    ended(fake, 5, start=FAKE_EPOCH + 100)  # its second run completed
    leave(tmp, summary(5, started_at=START))  # the first run's summary, found late
    sweep.sweep(["node1"])
    (run,) = store.runs("fp1")
    assert run.lower_bound and run.end_state == "requeued (a later run started)"


def test_a_job_still_finishing_waits_and_a_forgotten_job_is_dropped(world):
    fake, store, sweep, tmp = world
    running(fake, 5, fp="fp1")
    fake.jobs[5].state = "COMPLETING"
    leave(tmp, summary(5))
    leave(tmp, summary(77))  # Slurm no longer knows job 77
    assert sweep.sweep(["node1"]) == {5: NOT_FINISHED, 77: UNATTRIBUTED}
    assert store.runs() == []
    fake.jobs[5].state = "COMPLETED"
    assert sweep.sweep(["node1"]) == {5: RECORDED}  # 77 was acknowledged, 5 was not


def test_the_sweep_thread_records_the_runs_nobody_saw_end_off_the_monitors_rounds(world):
    """The watcher was down during job 5's run: its summary is found by the next sweep, a
    thread of the watcher process (a slow sweep must never hold up a round)."""
    fake, store, sweep, tmp = world
    ended(fake, 5)
    leave(tmp, summary(5))
    collector = FinalsCollector(lambda: sweep, sweep_s=0.2, tick_s=0.05)
    collector.start()
    try:
        wait = time.time() + 5
        while time.time() < wait and collector.sweeps < 3:
            time.sleep(0.05)
    finally:
        collector.stop()
    (run,) = store.runs("fp1")
    assert run.source == "sweep" and not run.lower_bound and collector.sweeps >= 3
    assert [e.kind for e in store.events()] == ["history"]


def test_a_tracked_run_ending_while_its_agent_is_down_is_a_lower_bound_merged_with_the_agents_summary(tmp_path):
    fake, helper, samples, monitor = rounds_support.make(tmp_path)
    running(fake, 9, fp="hist")
    for t in range(5):
        samples.put(9, START + t, mem=(1 + t) * GIB, started_at=START)
        monitor.tick()
    samples.now.clear()  # the agent is killed; the job ends 40 s later
    fake.jobs[9].state, fake.jobs[9].end_time = "COMPLETED", int(START) + 44
    samples.clock = START + 45
    monitor.tick()
    (run,) = helper.store.runs("hist")
    assert run.lower_bound and run.peak_mem_bytes == 5 * GIB and run.source == "monitor"
    # the agent is back: it finishes the job with the gap it could not sample, and a bit more memory
    leave(tmp_path, summary(9, 6.0, gaps=41.0, ended_at=START + 50))
    sweep = FinalsSweep(LocalFinals(tmp_path), HistoryRecorder(helper.store, SlurmRunner(executor=fake), "sweep"))
    assert sweep.sweep(["node1"]) == {9: MERGED}
    (run,) = helper.store.runs("hist")
    assert run.lower_bound and run.peak_mem_bytes == 6 * GIB and run.ended_at == int(START) + 44
    assert [e.kind for e in helper.store.events()].count("history") == 1


def test_the_jobs_the_epilog_names_are_recorded_by_the_watchers_collector(world):
    fake, store, sweep, tmp = world
    ended(fake, 5)
    ended(fake, 6)
    leave(tmp, summary(6))
    spool = EndedSpool(tmp / "ended-jobs")
    spool.append(5, "node1")
    spool.append(6, "node[1-2]")
    collector = FinalsCollector(lambda: sweep, spool, wait_s=5.0, sweep_s=3600, tick_s=0.05)
    collector.start()
    try:
        deadline = time.time() + 5
        while time.time() < deadline and collector.sweeps < 1:
            time.sleep(0.05)
        leave(tmp, summary(5, 4.0))  # the agent writes job 5's summary a moment after the epilog
        while time.time() < deadline and len(collector.results) < 2:
            time.sleep(0.05)
    finally:
        collector.stop()
    assert collector.results == {6: RECORDED, 5: RECORDED}
    assert sorted((r.job_id, r.source) for r in store.runs("fp1")) == [(5, "ctld-epilog"), (6, "ctld-epilog")]
    assert spool.take() == []  # taken once


def test_a_job_whose_summary_never_comes_is_left_to_the_sweep(world):
    fake, store, sweep, tmp = world
    ended(fake, 5)
    spool = EndedSpool(tmp / "ended-jobs")
    spool.append(5, "node1")
    collector = FinalsCollector(lambda: sweep, spool, wait_s=0.2, sweep_s=3600, tick_s=0.05)
    collector.start()
    try:
        deadline = time.time() + 5
        while time.time() < deadline and not collector.results:
            time.sleep(0.05)
    finally:
        collector.stop()
    assert collector.results == {5: "not-collected"} and store.runs() == []


def test_figures_from_a_summary_keep_an_unknown_gap_unknown():
    assert RunFigures.from_summary(summary(5, gaps=None)).gaps_s is None
    assert RunFigures.from_summary(summary(5, gaps=3.0)).gaps_s == 3.0


def test_the_helper_takes_a_job_end_on_its_socket_and_hands_it_to_the_watcher(tmp_path):
    from slurm_plugin.helper.daemon import Helper
    from slurm_plugin.helper.server import ask

    toml = tmp_path / "gpupack.toml"
    toml.write_text(f'[packer]\nmode = "enforce"\n[paths]\ndatabase = "{tmp_path}/gpupack.db"\n'
                    f'socket = "{tmp_path}/helper.sock"\nagent_dir = "{tmp_path}"\n')
    helper = Helper(toml, spawn_watcher=False)
    helper.server.serve_in_thread()
    try:
        ok = ask(tmp_path / "helper.sock", {"op": "job-ended", "job_id": "5", "nodes": "node[1-2]"})
        bad = ask(tmp_path / "helper.sock", {"op": "job-ended", "job_id": "x", "nodes": "node1"})
        none = ask(tmp_path / "helper.sock", {"op": "job-ended", "job_id": "6", "nodes": ""})
        spaced = ask(tmp_path / "helper.sock", {"op": "job-ended", "job_id": "7", "nodes": "node1 8 node2"})
    finally:
        helper.server.shutdown()
        helper.server.server_close()
    assert ok == {"status": "ok", "reason": "queued"}
    assert bad["status"] == none["status"] == spaced["status"] == "error" and "bad-request" in bad["reason"]
    assert EndedSpool(tmp_path / "ended-jobs").take() == [(5, ("node1", "node2"))]


def test_the_controller_epilog_tells_the_helper_and_never_fails(tmp_path, monkeypatch):
    from slurm_plugin import ctld_epilog
    from slurm_plugin.helper.server import HelperServer

    toml = tmp_path / "gpupack.toml"
    toml.write_text(f'[paths]\nsocket = "{tmp_path}/helper.sock"\n')
    assert "not told to the helper" in ctld_epilog.run(str(toml), 5, "node1")  # no helper: a line, no error
    taken = []
    server = HelperServer(tmp_path / "helper.sock", {"job-ended": lambda f: taken.append(f) or {"status": "ok"}}, set())
    server.serve_in_thread()
    try:
        monkeypatch.setenv("SLURM_JOB_ID", "42")
        monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
        assert ctld_epilog.main(["--config", str(toml)]) == 0
        assert ctld_epilog.run(str(toml), 0, "").startswith("no job id")
        toml.write_text("[paths\n")  # a broken file: said, not raised
        assert "not told" in ctld_epilog.run(str(toml), 5, "node1")
    finally:
        server.shutdown()
        server.server_close()
    assert taken == [{"job_id": b"42", "nodes": b"node[1-2]"}]


def test_the_controller_epilog_imports_nothing_but_the_standard_library():
    """slurmctld runs it with SlurmUser's /usr/bin/python3, which has none of the suite's
    dependencies (prometheus_client, click, numpy, ...)."""
    import subprocess
    import sys

    code = ("import sys, slurm_plugin.ctld_epilog; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'prometheus_client', 'click', 'numpy', "
            "'scipy', 'statsmodels', 'sqlite_utils'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_summary_of_a_run_recorded_already_merges_without_asking_slurm_for_its_workload(world):
    """A job without `fp=` in its record (it asked for shards itself): once it has ended Slurm
    may no longer give its batch script, or know it at all; the run recorded by the monitor
    names its workload."""
    fake, store, sweep, tmp = world
    monitor = HistoryRecorder(store, SlurmRunner(executor=fake), "monitor")
    ended(fake, 5)
    assert monitor.record(RunFigures(5, "node1", START, 2 * GIB, gaps_s=30.0), fp=("fpx", "root", "j")) == RECORDED
    del fake.jobs[5]  # forgotten by Slurm (MinJobAge)
    leave(tmp, summary(5, 3.0, gaps=31.0))
    assert sweep.sweep(["node1"]) == {5: MERGED}
    (run,) = store.runs("fpx")
    assert run.peak_mem_bytes == 3 * GIB and run.lower_bound


def test_a_sweep_looks_its_jobs_up_in_one_listing(world):
    fake, store, sweep, tmp = world
    for job_id, node in ((5, "node1"), (6, "node1"), (7, "node2")):
        ended(fake, job_id)
        leave(tmp, summary(job_id, node=node))
    fake.calls.clear()
    assert sweep.sweep(["node1", "node2"]) == {5: RECORDED, 6: RECORDED, 7: RECORDED}
    asked = [c for c in fake.calls if c[0] in ("squeue", "scontrol") and "--version" not in c]
    # one listing; and the workload's batch script once, for its history levels' keys
    # (helper.level_guesses: read once per new fingerprint, never again)
    assert [c[:2] for c in asked] == [["squeue", "--json"], ["scontrol", "write"]]


def test_the_node_epilog_asks_its_agent_to_finish_the_job_and_writes_no_sqlite_nor_asks_slurm(tmp_path, monkeypatch):
    """A node Epilog never writes SQLite, and it costs O(1) in the controller's jobs."""
    from click.testing import CliRunner

    from slurm_plugin.agent import client
    from slurm_plugin.cli.epilog_cmd import epilog
    from slurm_plugin.slurm import runner as runner_mod

    toml = tmp_path / "gpupack.toml"
    toml.write_text(f'[paths]\ndatabase = "{tmp_path}/db/gpupack.db"\nagent_dir = "{tmp_path}"\n')
    asked = []
    monkeypatch.setattr(client, "final_stats", lambda d, node, job, wait_s: asked.append((str(d), node, job)) or {})
    monkeypatch.setattr(runner_mod.SlurmRunner, "run", lambda *a, **k: pytest.fail("the node Epilog asked Slurm"))
    out = CliRunner().invoke(epilog, ["--config", str(toml), "--job-id", "5", "--node", "node1"])
    assert out.exit_code == 0 and asked == [(str(tmp_path), "node1", 5)]
    assert not (tmp_path / "db").exists()


def test_how_a_run_ended_is_known_once_slurm_shows_its_base_state():
    from datetime import datetime, timezone

    from slurm_plugin.history_recorder import run_end
    from slurm_plugin.slurm.model import Job

    began = datetime.fromtimestamp(FAKE_EPOCH, tz=timezone.utc)
    assert run_end(Job(5, state="COMPLETING", start_time=began), START) is None  # 22.05: not yet
    assert run_end(Job(5, state="COMPLETING", state_flags=("CANCELLED",), start_time=began), START).state == "CANCELLED"
    assert run_end(Job(5, state="RUNNING", start_time=began), START) is None
    assert run_end(Job(5, state="REQUEUED", state_flags=("PENDING",), start_time=began), START).state == "PENDING"
    end = run_end(Job(5, state="RUNNING", start_time=began), START - 60)  # an earlier run of the job
    assert end is not None and not end.latest_run


class _Link:
    """The agent side of `collect_finals`/`ack_finals`: runs kept until acknowledged."""

    def __init__(self, kept: list[dict]):
        self.kept = kept
        self.acks: list[list] = []

    def call(self, node: str, op: str, body: dict | None = None) -> dict:
        if op == "finals":
            return {"finals": list(self.kept)}
        self.acks.append(list(body["runs"]))
        self.kept = [s for s in self.kept if s.get("run") not in body["runs"] and s["job_id"] not in body["runs"]]
        return {"forgotten": 1}


def test_the_link_source_acknowledges_the_runs_it_collected_not_a_later_run_of_the_job():
    from slurm_plugin.helper.finals import LinkFinals

    link = _Link([{"job_id": 7, "run": "7.1000", "node": "node1"}])
    source = LinkFinals(link)
    assert [s["run"] for s in source.collect("node1")] == ["7.1000"]
    link.kept.append({"job_id": 7, "run": "7.2000", "node": "node1"})  # the requeued run ends meanwhile
    source.ack("node1", [7])
    assert link.acks == [["7.1000"]] and [s["run"] for s in link.kept] == ["7.2000"]
    source.ack("node1", [8])  # a summary without a run key: acknowledged by its job
    assert link.acks[-1] == [8]
