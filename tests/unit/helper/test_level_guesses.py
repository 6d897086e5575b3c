"""The helper keeps the history levels' keys and guesses: a recorded run's keys (read once
from its batch script), a right guess when a run a looser level sized completes measured, a
wrong one when restart-oom or a memory restart moves it; a level demoted for a workload."""
from __future__ import annotations

from packer.config import PackerConfig
from packer.history_levels import nearest_level
from packer.workload_identity import workload_keys
from store.db import Store
from store.levels import LevelStore
from slurm_plugin.helper.level_guesses import WRONG_EVENT, deciding_level, note_wrong_guess
from slurm_plugin.history_recorder import RECORDED, HistoryRecorder, RunFigures
from slurm_plugin.slurm.fake import FAKE_EPOCH, FakeSlurm
from slurm_plugin.slurm.runner import SlurmRunner

GIB = 1024**3
SCRIPT = "#!/bin/bash\npython3 train.py --lr {lr}\n"


def job(fake, job_id, lr, comment_tail="", state="COMPLETED"):
    keys = workload_keys("ann", "train", SCRIPT.format(lr=lr))
    fake.submit(job_id=job_id, state=state, user="ann", name="train", script=SCRIPT.format(lr=lr),
                nodes="node1", gres="gres:shard:2", start_time=FAKE_EPOCH, end_time=FAKE_EPOCH + 40,
                admin_comment=f"gpupack: packed shard:2 src=history(1){comment_tail} fp={keys.exact}")
    return keys


def figures(job_id, gib=6.0):
    return RunFigures(job_id, "node1", FAKE_EPOCH + 1, int(gib * GIB), 40.0, gaps_s=0.0, ended_at=FAKE_EPOCH + 40)


def test_a_recorded_run_is_found_from_a_variant_and_right_guesses_are_counted():
    fake, store = FakeSlurm(), Store()
    runner = SlurmRunner(executor=fake)
    recorder = HistoryRecorder(store, runner, "monitor")
    first = job(fake, 1, "0.01")
    assert recorder.record(figures(1)) == RECORDED
    levels = LevelStore(store)
    assert levels.keys_of(first.exact) == first
    second = job(fake, 2, "0.02", " lvl=variant")  # sized from the first run's variant
    (variant,) = levels.records(second, ("variant",), window=5)
    assert variant.estimate.peak_mem_bytes == 6 * GIB
    assert recorder.record(figures(2, 7.0)) == RECORDED
    (variant,) = levels.records(second, ("variant",), 5)
    assert (variant.right, variant.wrong) == (1, 0)
    calls = len(fake.calls)
    job(fake, 3, "0.01")  # the first script again: its keys are known, its script is not read again
    recorder.record(figures(3))
    assert not any("batch_script" in c for c in fake.calls[calls:])


def test_wrong_guesses_demote_the_level_for_the_workload():
    fake, store = FakeSlurm(), Store()
    runner = SlurmRunner(executor=fake)
    job(fake, 1, "0.01")
    HistoryRecorder(store, runner, "monitor").record(figures(1))
    config = PackerConfig(loosest_history_level="command")
    for job_id, lr in ((2, "0.02"), (3, "0.03")):
        keys = job(fake, job_id, lr, " lvl=variant", state="RUNNING")
        note_wrong_guess(store, runner, runner.job(job_id), keys.exact, "restart-oom")
    records = LevelStore(store).records(keys, ("variant", "command"), 5)
    assert (records[0].wrong, records[0].right) == (2, 0)
    choice = nearest_level(records, config)
    assert choice.level == "command" and choice.passed_over[0][0] == "variant"
    assert [e.kind for e in store.events()].count(WRONG_EVENT) == 2


def test_no_guess_is_counted_for_the_exact_level_or_a_job_without_a_record():
    fake, store = FakeSlurm(), Store()
    runner = SlurmRunner(executor=fake)
    keys = job(fake, 1, "0.01", " lvl=exact", state="RUNNING")
    assert deciding_level(runner.job(1)) is None and deciding_level(None) is None
    note_wrong_guess(store, runner, runner.job(1), keys.exact, "restart-oom")
    assert LevelStore(store).guesses() == []
