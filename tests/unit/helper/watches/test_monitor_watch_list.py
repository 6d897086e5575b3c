"""The monitor's list of watches: its docstring names each watch the code runs, in the order it
runs them, and each watch's per-job memory is its own, named by the watch and forgotten by the
retention watch when Slurm no longer lists the job."""
from __future__ import annotations

import re
from pathlib import Path

from slurm_plugin.helper import monitor as monitor_module
from slurm_plugin.helper.watches.round import KeepsJobs
from slurm_plugin.helper.watches.regroup import RegroupWatch
from tests.unit.helper.rounds_support import make

HELPER = Path(monitor_module.__file__).parent


def watch_file(watch) -> str:
    """The file a watch's class is defined in, relative to slurm_plugin/helper/."""
    path = Path(__import__(type(watch).__module__, fromlist=["_"]).__file__)
    return path.relative_to(HELPER).as_posix()


def test_the_docstring_lists_every_watch_the_monitor_runs_in_its_order(tmp_path):
    _, _, _, monitor = make(tmp_path)
    items = re.findall(r"^\s*(\d+)\. \*\*[^*]+\*\* \(`([^`]+)`", monitor_module.__doc__, re.M)
    assert [int(n) for n, _ in items] == list(range(1, len(items) + 1))
    assert [path for _, path in items] == [watch_file(w) for w in monitor.watches]


def test_each_watch_names_its_own_per_job_maps_and_the_monitor_prunes_them_all(tmp_path):
    _, _, _, monitor = make(tmp_path)
    pruned = monitor.job_maps()
    keepers = [w for w in monitor.watches if isinstance(w, KeepsJobs)]
    assert {w.name for w in keepers} >= {"grow", "regroup", "unisolated"}
    for keeper in [monitor.state, monitor.fingerprint_of, *keepers]:
        assert all(any(m is p for p in pruned) for m in keeper.job_maps())


def test_a_job_slurm_no_longer_lists_is_forgotten_in_a_watchs_maps(tmp_path):
    _, _, _, monitor = make(tmp_path)
    regroup = next(w for w in monitor.watches if isinstance(w, RegroupWatch))
    regroup.heads[5] = "node1:0"
    regroup.heads[6] = "node1:1"
    memory = monitor.retention_watch.memory
    memory.round([5, 6], 0.0)
    assert memory.round([6], memory.forget_after_s + 1.0) == 1
    assert regroup.heads == {6: "node1:1"}
