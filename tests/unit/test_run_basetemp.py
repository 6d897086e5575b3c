"""A test run's own temporary root (tests/conftest.py): two runs at once never remove each
other's folders, and ended runs' folders do not pile up."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import KEEP_ENDED_RUNS, RUN_PREFIX, own_basetemp


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_live_runs_folder_is_kept_and_ended_ones_are_pruned_to_the_newest(tmp_path):
    live = tmp_path / f"{RUN_PREFIX}{os.getppid()}"  # a process that outlives this test
    live.mkdir()
    ended = []
    for age in range(KEEP_ENDED_RUNS + 2):
        d = tmp_path / f"{RUN_PREFIX}{_dead_pid()}"
        d.mkdir(exist_ok=True)
        os.utime(d, (1000 + age, 1000 + age))
        ended.append(d)
    foreign = tmp_path / "pytest-7"  # pytest's own folders are not ours to remove
    foreign.mkdir()

    mine = own_basetemp(tmp_path, os.getpid())

    assert mine == tmp_path / f"{RUN_PREFIX}{os.getpid()}"
    assert live.exists() and foreign.exists()
    kept = sorted((d for d in ended if d.exists()), key=lambda d: d.stat().st_mtime)
    assert kept == ended[-KEEP_ENDED_RUNS:]
