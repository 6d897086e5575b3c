"""slurm.conf values the helper reads itself (slurm_plugin/slurm/conf_file.py)."""
from __future__ import annotations

import logging

from slurm_plugin.slurm.conf_file import job_requeue, job_requeue_of


def test_job_requeue_is_slurms_default_unless_the_file_says_0():
    assert job_requeue("ClusterName=c\n") is True
    assert job_requeue("JobRequeue=0\n") is False
    assert job_requeue("JobRequeue=1  # default\n") is True
    assert job_requeue("jobrequeue=0\nJobRequeue=1\n") is True  # the last line wins, as in Slurm
    assert job_requeue("# JobRequeue=0\n") is True


def test_a_bad_value_or_an_unreadable_file_is_named_and_read_as_slurms_default(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        assert job_requeue("JobRequeue=no\n") is True
        assert job_requeue_of(tmp_path / "missing.conf") is True
    assert "JobRequeue=no" in caplog.text and "missing.conf" in caplog.text
