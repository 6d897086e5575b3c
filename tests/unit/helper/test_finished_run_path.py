"""One path and one writer for a finished run: the identity kept by job id from the watcher's
first sight is what the end records under (no AdminComment parsed back, no batch script read
again, a requeued job keeps it), one function writes the history table, and the path from the
controller's epilog and the agents loses nothing and writes each run once."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from packer.fingerprint import fingerprint
from store.identities import JobIdentities, JobIdentity
from slurm_plugin import ctld_epilog
from slurm_plugin.helper.finals import EndedSpool, FinalsSweep, LocalFinals, SpoolFull
from slurm_plugin.helper.watches.tracks import Fingerprints
from slurm_plugin.history_recorder import MERGED, RECORDED, HistoryRecorder, RunFigures
from slurm_plugin.slurm.fake import FAKE_EPOCH
from slurm_plugin.slurm.runner import SlurmRunner

from tests.unit.helper.rounds_support import GIB, running
from tests.unit.helper.test_history_finals import START, ended, leave, summary, world  # noqa: F401

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("slurm_plugin", "store", "packer", "mig", "predictor", "simulator", "simjobs", "gpus")


def _sources():
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def test_one_function_writes_the_history_table():
    """`history_recorder.write_run` is the only caller of `Store.record_run`, and no module but
    the store's own writes the `runs` table in SQL."""
    callers, sql_writers = [], []
    for path in _sources():
        text = path.read_text()
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(text)
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr == "record_run":
                    callers.append((rel, func.name))
        if re.search(r"(insert\s+(or\s+\w+\s+)?into|update|replace\s+into)\s+runs\b"
                     r"|\[\"runs\"\]\.(insert|upsert|update)", text, re.IGNORECASE):
            sql_writers.append(rel)
    assert callers == [("slurm_plugin/history_recorder.py", "write_run")]
    assert sql_writers == ["store/db.py"]


def _identity_of(store, fake, job_id):
    """The watcher sees job `job_id` for the first time (a monitor round's `fingerprint_of`)."""
    return Fingerprints(lambda: SlurmRunner(executor=fake), lambda: store)(fake.runner_job(job_id))


@pytest.fixture
def seen(world):  # noqa: F811
    fake, store, sweep, tmp = world
    fake.runner_job = lambda job_id: SlurmRunner(executor=fake).job(job_id)
    return fake, store, sweep, tmp


def test_the_end_records_under_the_identity_kept_at_first_sight_not_what_the_admincomment_says_then(seen):
    fake, store, sweep, tmp = seen
    running(fake, 5, fp="fp1")
    assert _identity_of(store, fake, 5) == "fp1"
    fake.jobs[5].admin_comment = "gpupack: packed shard:2 fp=forged lvl=variant"  # edited after the start
    ended(fake, 5, fp="forged")
    leave(tmp, summary(5))
    fake.calls.clear()
    assert sweep.sweep(["node1"]) == {5: RECORDED}
    (run,) = store.runs()
    assert run.fingerprint == "fp1" and JobIdentities(store).of(5).level == ""
    # nothing read back at the end: the job's state (one lookup), no batch script
    assert not [c for c in fake.calls if c[:2] == ["scontrol", "write"]]


def test_a_job_without_a_record_is_identified_from_its_script_once_at_first_sight(seen):
    """Observe mode (no `fp=`): the script is read when the watcher first sees the job, never at
    its end, when Slurm may no longer give it."""
    fake, store, sweep, tmp = seen
    running(fake, 5, fp="x")
    job = fake.jobs[5]
    job.admin_comment = ""
    expected = fingerprint(job.user or "", job.name or "", job.script.encode())
    assert _identity_of(store, fake, 5) == expected
    ended(fake, 5)
    fake.jobs[5].admin_comment, fake.jobs[5].script = "", "#!/bin/sh\necho another script\n"
    leave(tmp, summary(5))
    fake.calls.clear()
    assert sweep.sweep(["node1"]) == {5: RECORDED}
    assert [r.fingerprint for r in store.runs()] == [expected]
    assert not [c for c in fake.calls if c[:2] == ["scontrol", "write"]]


def test_a_requeued_job_keeps_its_identity_for_its_next_run(seen):
    fake, store, sweep, tmp = seen
    running(fake, 5, fp="fp1")
    _identity_of(store, fake, 5)
    leave(tmp, summary(5, 2.0, gaps=0.0))
    fake.jobs[5].state = "PENDING"  # requeued: the run ended, the job waits again
    fake.jobs[5].admin_comment = "gpupack: exclusive reason=memory-restart fp=other"
    assert sweep.sweep(["node1"]) == {5: RECORDED}
    ended(fake, 5, fp="other", start=FAKE_EPOCH + 100)  # its next run
    leave(tmp, summary(5, 3.0, started_at=FAKE_EPOCH + 101))
    assert sweep.sweep(["node1"]) == {5: RECORDED}
    assert sorted((r.fingerprint, r.lower_bound) for r in store.runs()) == [("fp1", False), ("fp1", True)]


def test_the_first_identity_noted_wins_and_a_job_needs_a_fingerprint(tmp_path):
    from store.db import Store

    identities = JobIdentities(Store(tmp_path / "db.sqlite"))
    assert identities.note(JobIdentity(5, "fp1", "ann", "train", "variant"))
    assert not identities.note(JobIdentity(5, "fp2", "ann", "train"))
    assert identities.of(5) == JobIdentity(5, "fp1", "ann", "train", "variant") and identities.of(6) is None
    with pytest.raises(ValueError):
        identities.note(JobIdentity(7, ""))
    assert identities.prune(before=0.0) == 0
    identities.note(JobIdentity(8, "fp8"), at=50.0)
    identities.note(JobIdentity(9, "fp9"), at=60.0)
    assert identities.prune(before=10.0, max_rows=2) == 1 and identities.of(8) is None  # the oldest beyond 2
    assert identities.prune(before=65.0) == 1 and identities.of(9) is None and identities.of(5) is not None


def test_a_job_ending_while_the_helper_is_down_is_written_once_when_it_comes_back(seen, tmp_path):
    """The controller's epilog finds no helper: it says so and exits 0; the agent keeps the
    summary; the watcher's sweep writes it once the helper is back, and never again."""
    fake, store, sweep, tmp = seen
    toml = tmp_path / "gpupack.toml"
    toml.write_text(f'[paths]\nsocket = "{tmp_path}/down.sock"\n')
    running(fake, 5, fp="fp1")
    _identity_of(store, fake, 5)
    ended(fake, 5)
    leave(tmp, summary(5))
    assert "not told to the helper" in ctld_epilog.run(str(toml), 5, "node1")
    assert sweep.sweep(["node1"]) == {5: RECORDED}
    assert sweep.sweep(["node1"]) == {}  # acknowledged: nothing left on the agent
    assert len(store.runs()) == 1 and [e.kind for e in store.events()] == ["history"]


def test_a_run_delivered_twice_and_seen_by_the_monitor_is_one_row_and_one_event(seen):
    fake, store, sweep, tmp = seen
    running(fake, 5, fp="fp1")
    _identity_of(store, fake, 5)
    ended(fake, 5)
    spool = EndedSpool(tmp / "ended-jobs")
    spool.append(5, "node1")
    spool.append(5, "node1")  # slurmctld ran the epilog twice (or it retried)
    assert spool.take() == [(5, ("node1",))]
    monitor = HistoryRecorder(store, SlurmRunner(executor=fake), "monitor")
    assert monitor.record(RunFigures(5, "node1", START, 2 * GIB, gaps_s=0.0)) == RECORDED
    leave(tmp, summary(5, 3.0))
    assert sweep.sweep(["node1"], source="ctld-epilog") == {5: MERGED}
    leave(tmp, summary(5, 3.0))  # delivered again (an acknowledgement was lost)
    assert sweep.sweep(["node1"]) == {5: MERGED}
    (run,) = store.runs()
    assert run.peak_mem_bytes == 3 * GIB and [e.kind for e in store.events()] == ["history"]


def test_the_ended_jobs_spool_is_bounded_and_skips_what_is_not_a_job(tmp_path, caplog):
    spool = EndedSpool(tmp_path / "ended-jobs", max_bytes=32)
    spool.append(5, "node[1-2]")
    spool.append(6, "node1")
    with pytest.raises(SpoolFull):
        spool.append(7, "node-with-a-long-name[1-9]")
    with open(spool.path, "a") as fh:
        fh.write("x node1\n8 \n")
    assert spool.take() == [(5, ("node1", "node2")), (6, ("node1",))]
    assert "2 line(s)" in caplog.text
    spool.append(7, "node1")  # taken: room again
    assert spool.take() == [(7, ("node1",))]



def test_a_round_writes_no_history_the_finals_thread_writes_what_it_saw(tmp_path):
    """The monitor hands the run it saw end to the one writer; a round alone writes nothing,
    and the watcher's finals thread writes it as one row (source `monitor`)."""
    import time

    from slurm_plugin.helper.finals import FinalsCollector
    from slurm_plugin.helper.monitor import Monitor
    from slurm_plugin.helper.monitor_settings import MonitorSettings
    from tests.unit.helper.rounds_support import FakeHelper, Samples
    from slurm_plugin.slurm.fake import FakeSlurm

    fake, helper, samples = FakeSlurm("22.05.8"), FakeHelper(tmp_path, "enforce"), Samples()
    monitor = Monitor(helper, runner=SlurmRunner(executor=fake), samples=samples,
                      settings=MonitorSettings(skip_requeue_delay=False), clock=lambda: samples.clock)
    running(fake, 9, fp="hist")
    for t in range(3):
        samples.put(9, START + t, mem=(1 + t) * GIB, started_at=START)
        monitor.tick()
    fake.jobs[9].state, fake.jobs[9].end_time = "COMPLETED", int(START) + 3
    samples.clock = START + 4
    monitor.tick()
    assert helper.store.runs() == []  # the round wrote nothing
    sweep = FinalsSweep(LocalFinals(tmp_path), HistoryRecorder(helper.store, SlurmRunner(executor=fake), "sweep"))
    collector = FinalsCollector(lambda: sweep, sweep_s=3600, tick_s=0.05,
                                monitored=lambda: monitor.actions.finished_runs)
    collector.start()
    try:
        deadline = time.time() + 10
        while time.time() < deadline and not helper.store.runs():
            time.sleep(0.05)
    finally:
        collector.stop()
    (run,) = helper.store.runs("hist")
    assert run.source == "monitor" and run.peak_mem_bytes == 3 * GIB
    assert monitor.actions.finished_runs.take() == []


def test_the_monitors_inbox_is_bounded_and_counts_what_it_drops():
    from packer.run_truth import RunEnd
    from slurm_plugin.helper.run_inbox import RunInbox, SeenRun

    inbox = RunInbox(max_runs=2)
    for job_id in (1, 2, 3):
        inbox.put(SeenRun(RunFigures(job_id, "node1", START, GIB), None, ("fp", "u", "n"), RunEnd("COMPLETED")))
    assert [s.figures.job_id for s in inbox.take()] == [2, 3] and inbox.dropped == 1
