"""Command lines: argv lists, one element per value, checked before they run."""
from __future__ import annotations

from datetime import datetime

import pytest

from slurm_plugin.slurm import build
from slurm_plugin.slurm.model import SlurmVersion

V22 = SlurmVersion(22, 5, 8)
V23 = SlurmVersion(23, 11, 4)


def test_squeue_lists_every_state() -> None:
    assert build.squeue_args() == ["squeue", "--json", "--states=all", "--all"]


def test_show_job_and_nodes_follow_the_release() -> None:
    assert build.show_job_args(7, V23) == ["scontrol", "--json", "show", "job", "7"]
    assert build.show_job_args(7, V22) == build.squeue_args()  # 22.05 has no scontrol --json
    assert build.show_nodes_args(V23) == ["scontrol", "--json", "show", "node"]
    assert build.show_nodes_args(V22) == ["sinfo", "--json"]


def test_update_keeps_each_value_one_argument() -> None:
    args = build.update_job_args(
        7, {"AdminComment": "site note | gpupack: packed shard:2", "ExcNodeList": ["node1", "node2"]}
    )
    assert args == [
        "scontrol",
        "update",
        "JobId=7",
        "AdminComment=site note | gpupack: packed shard:2",
        "ExcNodeList=node1,node2",
    ]
    assert build.update_job_args(7, {"Priority": 10**6})[-1] == "Priority=1000000"
    assert build.update_job_args(7, {"ExcNodeList": None})[-1] == "ExcNodeList="


@pytest.mark.parametrize(
    "fields, message",
    [
        ({}, "nothing to update"),
        ({"Bogus": 1}, "unknown job field 'Bogus'"),
        ({"JobId=8 Priority": 1}, "unknown job field"),
        ({"Comment": "two\nlines"}, "one line"),
    ],
)
def test_update_refuses_what_scontrol_would_misread(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build.update_job_args(7, fields)


@pytest.mark.parametrize("bad", [0, -1, "7", 7.0, True, None])
def test_job_ids_must_be_positive_ints(bad: object) -> None:
    with pytest.raises(ValueError, match="positive integer"):
        build.hold_args(bad)  # type: ignore[arg-type]


def test_job_verbs() -> None:
    assert build.requeue_args(7) == ["scontrol", "requeue", "7"]
    assert build.requeue_args([7, 8], hold=True) == ["scontrol", "requeuehold", "7,8"]
    assert build.hold_args(7) == ["scontrol", "hold", "7"]
    assert build.release_args(7) == ["scontrol", "release", "7"]
    assert build.top_args(7) == ["scontrol", "top", "7"]
    assert build.batch_script_args(7) == ["scontrol", "write", "batch_script", "7", "-"]


def test_sacct() -> None:
    assert build.sacct_args() == ["sacct", "--json", "-X", "--allusers"]
    assert build.sacct_args([1, 2], since=datetime(2024, 1, 31, 12)) == [
        "sacct", "--json", "-X", "--allusers", "--jobs", "1,2", "--starttime", "2024-01-31T12:00:00",
    ]
    with pytest.raises(ValueError, match="since"):
        build.sacct_args(since="now; rm -rf /")


def test_signal_args_send_a_signal_never_a_cancel() -> None:
    assert build.signal_args(7, "usr1") == ["scancel", "--signal=USR1", "--batch", "7"]
    assert build.signal_args(7, "SIGUSR2", batch=False) == ["scancel", "--signal=SIGUSR2", "7"]
    with pytest.raises(ValueError, match="USR1"):
        build.signal_args(7, "USR1 --full")
