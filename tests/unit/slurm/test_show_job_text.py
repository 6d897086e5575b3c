"""A running job's allocation from 22.05's `scontrol -d show job ID` (slurm/show_job_text.py), on
records of real Slurm 22.05.8 (tests/data/slurm/scontrol_22.05_show_job_detail_*.txt): a user's
job name or comment may print lines of its own, and none of them is taken."""
from __future__ import annotations

from pathlib import Path

import pytest

from slurm_plugin.slurm.show_job_text import ShowJobTextError, parse_show_job_detail

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm"


def record(kind: str) -> tuple[str, int]:
    text = (DATA / f"scontrol_22.05_show_job_detail_{kind}.txt").read_text()
    return text, int(text.split()[0].removeprefix("JobId="))


@pytest.mark.parametrize("kind, hosts, gres", [
    ("gpu", ("node1",), ("gpu:h100:1(IDX:0)",)),
    ("shard", ("node1",), ("shard:h100:2(IDX:1)",)),
    ("two_nodes", ("node2", "node3"), ("gpu:h100:1(IDX:0)", "gpu:h100:1(IDX:0)")),  # one line for node[2-3]
])
def test_slurms_own_records_are_read(kind, hosts, gres):
    text, job = record(kind)
    shown = parse_show_job_detail(text, job)
    assert shown.hosts == hosts and shown.gres == gres and shown.excluded_nodes == ()


@pytest.mark.parametrize("kind, why", [
    ("forged_name", "outside"),  # -J $'evil\n     Nodes=node1 CPU_IDs=0 Mem=0 GRES=gpu:h100:2(IDX:0-1)'
    ("forged_comment", "JOB_GRES"),  # --comment with a JOB_GRES line and its Nodes= line
])
def test_a_record_with_a_users_forged_lines_is_refused(kind, why):
    text, job = record(kind)
    with pytest.raises(ShowJobTextError, match=why):
        parse_show_job_detail(text, job)


def test_another_jobs_record_or_none_is_refused():
    text, job = record("gpu")
    with pytest.raises(ShowJobTextError, match="not job"):
        parse_show_job_detail(text, job + 1)
    with pytest.raises(ShowJobTextError, match="not job"):
        parse_show_job_detail("", job)


@pytest.mark.parametrize("edit", [
    lambda t: t.replace("JobName=wrap", "JobName=ExcNodeList=node9"),  # a second ExcNodeList=
    lambda t: t.replace("WorkDir=/tmp", "WorkDir=/tmp/Socks/Node=x"),  # a second Socks/Node=
    lambda t: t.replace("   JOB_GRES=", "   TresPerJob=x\n   JOB_GRES="),  # JOB_GRES moved off its place
    lambda t: t.replace(" GRES=gpu:h100:1(IDX:0)", " GRES=gpu:h100:1(IDX:0) extra"),  # an odd allocation line
    lambda t: t.replace("     Nodes=node1 CPU_IDs=0 Mem=0 GRES=gpu:h100:1(IDX:0)\n", ""),  # no allocation
])
def test_records_out_of_slurms_shape_are_refused(edit):
    text, job = record("gpu")
    with pytest.raises(ShowJobTextError):
        parse_show_job_detail(edit(text), job)


def test_an_array_tasks_record_is_read():
    text, job = record("gpu")
    text = text.replace(f"JobId={job} JobName=wrap", f"JobId={job} ArrayJobId={job - 1} ArrayTaskId=1 JobName=wrap")
    assert parse_show_job_detail(text, job).hosts == ("node1",)


def test_excluded_nodes_are_read():
    text, job = record("gpu")
    shown = parse_show_job_detail(text.replace("ExcNodeList=(null)", "ExcNodeList=node[2-3]"), job)
    assert shown.excluded_nodes == ("node2", "node3")
