"""The agent learns its jobs from the helper's pushed lists (never from slurmctld), and keeps
finished runs' summaries until the helper acknowledges them."""
from __future__ import annotations

import pytest

from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.ops import dispatch
from slurm_plugin.agent.slurm_jobs import PushedJobs
from slurm_plugin.agent.state import BATCH_STEP
from slurm_plugin.agent.trust import Peer

ROOT = Peer(0, 0, 0)


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_pushed_list_is_taken_in_generation_order_and_forgotten_when_old():
    clock = Clock()
    jobs = PushedJobs(max_age_s=60.0, clock=clock)
    assert jobs() is None  # nothing pushed yet: the agent frees nothing
    assert jobs.update([1, 2], generation=10) and jobs() == {1, 2}
    assert not jobs.update([1], generation=9) and jobs() == {1, 2}  # a delayed older list is refused
    assert jobs.update([2], generation=10) and jobs() == {2}  # the same generation again: idempotent
    assert jobs.lists == 1  # one list made by the helper (neither the older nor the repeat count)
    clock.now += 61  # the helper went silent: no list is trusted
    assert jobs() is None


def agent_with_job(tmp_path, clock) -> NodeAgent:
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB"])
    agent = NodeAgent("node1", tmp_path, backend, list_running_jobs=PushedJobs(), clock=clock)
    agent.isolate(7, BATCH_STEP, 0, {"SLURM_JOB_GPUS": "0", "SLURM_SHARDS_ON_NODE": "1"})
    return agent


def test_a_job_missing_from_the_pushed_list_is_freed_and_its_final_kept_until_acked(tmp_path):
    clock = Clock()
    agent = agent_with_job(tmp_path, clock)
    agent.tick()
    clock.now += 30  # the agent was stopped 30 s: the run has a gap in its samples
    dispatch(agent, "jobs", {"job_ids": [7], "generation": 1}, ROOT)
    agent.tick()
    assert agent.reconcile() == [] and 7 in agent.jobs
    clock.now += 2
    # judged only by a list made after the agent first saw the job: the second to come since
    dispatch(agent, "jobs", {"job_ids": [], "generation": 2}, ROOT)
    assert agent.reconcile() == [] and 7 in agent.jobs
    dispatch(agent, "jobs", {"job_ids": [], "generation": 3}, ROOT)
    assert agent.reconcile() == ["job 7: gone from Slurm, isolation freed"]
    (final,) = dispatch(agent, "finals", {}, ROOT)["finals"]
    assert final["job_id"] == 7 and final["gaps"] == pytest.approx(30.0) and final["run"].startswith("7.")
    assert dispatch(agent, "finals", {}, ROOT)["finals"] == [final]  # kept until acknowledged
    assert dispatch(agent, "ack_finals", {"runs": [final["run"]]}, ROOT)["forgotten"] == 1
    assert dispatch(agent, "ack_finals", {"runs": [7]}, ROOT)["forgotten"] == 0  # again: no error
    assert dispatch(agent, "finals", {}, ROOT)["finals"] == []
    with pytest.raises(ValueError, match="older"):
        dispatch(agent, "jobs", {"job_ids": [7], "generation": 1}, ROOT)


def test_a_list_made_before_a_job_started_never_frees_it_however_long_the_helpers_round(tmp_path):
    """Seen on a loaded machine: the helper's rounds took 5 s, so (its duty cap) a list came
    every 20 s; a job that started after one listing was freed by it 11 s later, its reports
    refused ("not isolated"), its checkpoint never seen."""
    clock = Clock()
    agent = NodeAgent("node1", tmp_path, SimGpuBackend(None, "node1", gpus=["H100-80GB"]),
                      list_running_jobs=PushedJobs(clock=clock), clock=clock)
    dispatch(agent, "jobs", {"job_ids": [], "generation": 1}, ROOT)  # listed before job 7 started
    agent.isolate(7, BATCH_STEP, 0, {"SLURM_JOB_GPUS": "0", "SLURM_SHARDS_ON_NODE": "1"})
    for _ in range(4):  # 20 s without a list: far past the grace
        clock.now += 5
        assert agent.reconcile() == [] and 7 in agent.jobs
    # the round's list comes, made before the job started (the helper pushes after its listing)
    dispatch(agent, "jobs", {"job_ids": [], "generation": 2}, ROOT)
    clock.now += 20
    assert agent.reconcile() == [] and 7 in agent.jobs
    # the next one was made after that one came, so after the job started: it is believed
    dispatch(agent, "jobs", {"job_ids": [], "generation": 3}, ROOT)
    assert agent.reconcile() == ["job 7: gone from Slurm, isolation freed"]

    # a requeued run isolated here again is judged anew: the lists so far were made before it
    clock.now += 5
    agent.isolate(7, BATCH_STEP, 0, {"SLURM_JOB_GPUS": "0", "SLURM_SHARDS_ON_NODE": "1"})
    clock.now += 30
    assert agent.reconcile() == [] and 7 in agent.jobs
    dispatch(agent, "jobs", {"job_ids": [7], "generation": 4}, ROOT)
    dispatch(agent, "jobs", {"job_ids": [7], "generation": 5}, ROOT)
    assert agent.reconcile() == [] and 7 in agent.jobs  # listed: running


def test_a_layout_older_than_the_last_is_refused(tmp_path):
    from slurm_plugin.agent.plans import StalePlan

    agent = agent_with_job(tmp_path, Clock())
    assert dispatch(agent, "layout", {"policy": "off", "pending_shards": [], "generation": 5}, ROOT)["status"] == "ok"
    with pytest.raises(StalePlan):
        dispatch(agent, "layout", {"policy": "by-size", "pending_shards": [1], "generation": 4}, ROOT)


def test_the_pushed_shards_are_slurms_record_and_a_bad_map_refuses_the_list(tmp_path):
    clock = Clock()
    agent = agent_with_job(tmp_path, clock)
    dispatch(agent, "jobs", {"job_ids": [7, 8], "generation": 1, "shards": {"7": 1, "8": 0}}, ROOT)
    assert agent.list_running_jobs.shards_of(7) == 1 and agent.list_running_jobs.shards_of(8) == 0
    assert agent.list_running_jobs.shards_of(9) is None  # not listed: unknown
    for bad in ({"7": -1}, {"7": True}, {"x": 1}, [1]):
        with pytest.raises(ValueError, match="shards"):
            dispatch(agent, "jobs", {"job_ids": [7], "generation": 2, "shards": bad}, ROOT)
    assert agent.list_running_jobs.generation == 1
