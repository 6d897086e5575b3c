"""Decided again at dispatch (packer.dispatch): a packed job at its turn gets an idle whole GPU."""
from __future__ import annotations

from packer.dispatch import QueuedJob, whole_gpu_back


def test_a_packed_job_at_its_turn_gets_an_idle_gpu_back():
    assert whole_gpu_back([QueuedJob(5, 100, packed=True)], {"n1": 1}) == [(5, "n1")]
    assert whole_gpu_back([QueuedJob(5, 100, packed=True)], {"n1": 0}) == []


def test_jobs_ahead_take_the_idle_gpus_first_and_a_waiting_whole_job_ends_the_walk():
    queue = [QueuedJob(1, 300, packed=False), QueuedJob(2, 200, packed=True), QueuedJob(3, 100, packed=True)]
    assert whole_gpu_back(queue, {"n1": 1}) == []  # job 1 takes the only idle GPU
    # one idle GPU left for jobs 2 and 3: neither gets it whole, they share it on their shares
    assert whole_gpu_back(queue, {"n1": 2}) == []
    assert whole_gpu_back(queue, {"n1": 3}) == [(2, "n1"), (3, "n1")]
    blocked = [QueuedJob(1, 300, packed=False, gpus=2), QueuedJob(2, 200, packed=True)]
    assert whole_gpu_back(blocked, {"n1": 1}) == []  # job 1 waits for two: job 2 is not at its turn
    # a packed job with no idle GPU starts on shares: the walk goes on
    packed_first = [QueuedJob(1, 300, packed=True, excluded=frozenset({"n1"})), QueuedJob(2, 200, packed=True)]
    assert whole_gpu_back(packed_first, {"n1": 1}) == [(2, "n1")]


def test_only_a_gpu_the_job_may_use_and_ties_go_to_the_older_job():
    pinned = QueuedJob(4, 100, packed=True, required=frozenset({"n2"}))
    assert whole_gpu_back([pinned], {"n1": 1}) == []
    assert whole_gpu_back([pinned], {"n1": 1, "n2": 1}) == [(4, "n2")]
    tie = [QueuedJob(9, 100, packed=True), QueuedJob(8, 100, packed=True)]
    assert whole_gpu_back(tie, {"n1": 2}) == [(8, "n1"), (9, "n1")]


def test_packed_jobs_that_outnumber_the_idle_gpus_all_start_on_shares():
    three = [QueuedJob(i, 100, packed=True) for i in (1, 2, 3)]
    assert whole_gpu_back(three, {"n1": 1}) == []  # one GPU of its own for the first would leave two waiting
    assert whole_gpu_back(three, {"n1": 2}) == []
    assert whole_gpu_back(three, {"n1": 1, "n2": 2}) == [(1, "n1"), (2, "n2"), (3, "n2")]
