"""The dev cluster follows a Slurm daemon through `scontrol reconfigure` by its pid file."""
from __future__ import annotations

import os

import pytest

from slurm_plugin.devcluster.processes import Process, pid_in


def test_a_pid_written_over_a_longer_one_is_read_from_the_first_line(tmp_path):
    """Seen on Slurm 24.11: the re-executed slurmctld wrote "560\\n" over "31548\\n" without
    truncating (the pid counter had wrapped); the cluster then thought it was not running and
    started a second one."""
    pidfile = tmp_path / "slurmctld.pid"
    pidfile.write_text(f"{os.getpid()}\n8\n")
    assert pid_in(pidfile) == os.getpid()
    gone = 2**22 + 1  # above any pid_max: no such process
    me = Process("slurmctld", "slurmctld", gone, marker="", pidfile=str(pidfile))
    assert me.live_pid() == os.getpid()


def test_an_empty_or_unreadable_pid_file(tmp_path):
    pidfile = tmp_path / "slurmd.pid"
    pidfile.write_text("")
    assert pid_in(pidfile) == 0
    pidfile.write_text("not a pid\n")
    with pytest.raises(ValueError):
        pid_in(pidfile)
    assert Process("slurmd", "node1", 2**22 + 1, marker="", pidfile=str(pidfile)).live_pid() is None
