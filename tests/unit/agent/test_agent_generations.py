"""Per-node plans and pushed job lists carry a generation; a restarted agent still refuses one
older than it took before its restart."""
from __future__ import annotations

import pytest

from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.ops import dispatch
from slurm_plugin.agent.plans import Generations, StalePlan
from slurm_plugin.agent.slurm_jobs import PushedJobs
from slurm_plugin.agent.trust import Peer

ROOT = Peer(0, 0, 0)


def agent(tmp_path) -> NodeAgent:
    backend = SimGpuBackend(tmp_path / "sim", "node1", gpus=["H100-80GB"])
    return NodeAgent("node1", tmp_path, backend, list_running_jobs=PushedJobs())


@pytest.mark.parametrize("op,body", [
    ("jobs", {"job_ids": [7]}),
    ("layout", {"policy": "off", "pending_shards": []}),
    ("mps_plan", {"plan": {}}),
])
def test_an_older_plan_is_refused_after_the_agent_restarts(tmp_path, op, body):
    dispatch(agent(tmp_path), op, {**body, "generation": 2000}, ROOT)
    restarted = agent(tmp_path)
    with pytest.raises(ValueError, match="older"):
        dispatch(restarted, op, {**body, "generation": 1999}, ROOT)
    assert dispatch(restarted, op, {**body, "generation": 2000}, ROOT)["status"] == "ok"  # the same: idempotent
    assert dispatch(restarted, op, {**body, "generation": 2001}, ROOT)["status"] == "ok"


def test_generations_are_kept_per_kind_in_one_file(tmp_path):
    path = tmp_path / "generations.json"
    g = Generations(path)
    g.take("jobs", 5)
    g.take("layout", 9)
    again = Generations(path)
    assert (again.newest("jobs"), again.newest("layout"), again.newest("other")) == (5, 9, -1)
    with pytest.raises(StalePlan):
        again.take("layout", 8)
    again.take("jobs", 6)  # the jobs' generation does not bound the layout's
    assert Generations(path).newest("jobs") == 6


def test_an_unreadable_generations_file_is_said_and_counts_as_none(tmp_path, caplog):
    path = tmp_path / "generations.json"
    path.write_text("{not json")
    g = Generations(path)
    assert g.newest("jobs") == -1 and "unreadable" in caplog.text
    path.write_text('{"jobs": "many", "layout": 4}')
    g = Generations(path)
    assert (g.newest("jobs"), g.newest("layout")) == (-1, 4) and "not integers" in caplog.text
