"""A batch job's output files from squeue's record (`slurm_plugin.slurm.stdio`) and their way
to the agents (`job_outputs_by_node`)."""
from __future__ import annotations

import pytest

from slurm_plugin.helper.sample_source import job_outputs_by_node
from slurm_plugin.slurm.model import Job
from slurm_plugin.slurm.parse import parse_job
from slurm_plugin.slurm.stdio import expand, output_paths


def job(**kw) -> Job:
    base = dict(job_id=42, name="train", user="ana", state="RUNNING", nodes="node1", batch_host="node1",
                work_dir="/home/ana/run", user_id=1000)
    return Job(**{**base, **kw})


@pytest.mark.parametrize("template,expected", [
    ("%j.out", "42.out"), ("%x-%j.err", "train-42.err"), ("/scratch/%u/%N/%5j.log", "/scratch/ana/node1/00042.log"),
    ("100%%.log", "100%.log"), ("%t-%n.out", "0-0.out"), ("a\\%j.out", "a%j.out"),
])
def test_patterns_are_expanded_for_the_batch_step(template, expected):
    assert expand(template, job(), "node1") == expected


@pytest.mark.parametrize("template", ["%s.out", "%J.out", "%b.out", "%a.out"])
def test_a_pattern_that_cannot_be_expanded_gives_none(template):
    assert expand(template, job(), "node1") is None


def test_default_relative_and_shared_paths():
    assert output_paths(job()) == ("/home/ana/run/slurm-42.out",)
    assert output_paths(job(std_out="/o/%j.out", std_err="%x.err")) == ("/home/ana/run/train.err", "/o/42.out")
    assert output_paths(job(std_out="/o/x.out", std_err="/o/x.out")) == ("/o/x.out",)
    assert output_paths(job(array_job_id=40, array_task_id=2)) == ("/home/ana/run/slurm-40_2.out",)
    assert output_paths(job(array_job_id=40, array_task_id=0xFFFFFFFE)) == ("/home/ana/run/slurm-42.out",)
    assert output_paths(job(std_out="/dev/null")) == ()
    assert output_paths(job(work_dir=None)) == ()
    assert output_paths(job(std_out="%s.out")) == ()


def test_squeue_records_give_the_paths_and_the_expanded_ones_win():
    record = {"job_id": 42, "job_state": "RUNNING", "user_id": 1000, "standard_output": "%j.out",
              "standard_error": "", "current_working_directory": "/home/ana"}
    j = parse_job(record)
    assert (j.std_out, j.std_err, j.work_dir, j.user_id) == ("%j.out", None, "/home/ana", 1000)
    j = parse_job({**record, "stdout_expanded": "/home/ana/42.out"})
    assert j.std_out == "/home/ana/42.out"


def test_each_running_jobs_output_goes_to_its_nodes():
    jobs = [job(), job(job_id=43, state="PENDING"), job(job_id=44, user_id=None), job(job_id=45, std_out="%s")]
    assert job_outputs_by_node(jobs) == {"node1": {42: {"uid": 1000, "paths": ["/home/ana/run/slurm-42.out"]}}}


def test_a_job_listed_while_it_starts_or_ends_has_its_output_told_too():
    """The monitor names a CONFIGURING or COMPLETING job to its node's agent: its paths go with it
    (before: RUNNING only, and an end judged on such a list was judged without its output)."""
    jobs = [job(state="CONFIGURING"), job(job_id=43, state="COMPLETING"), job(job_id=44, state="SUSPENDED")]
    assert sorted(job_outputs_by_node(jobs)["node1"]) == [42, 43, 44]
