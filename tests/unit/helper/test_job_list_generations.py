"""Job list generations outlive restarts on the agent's side; a helper whose clock was set back
counts on from the agent's newest generation instead of leaving the node stale."""
from __future__ import annotations

from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.ops import dispatch
from slurm_plugin.agent.paths import AgentError
from slurm_plugin.agent.slurm_jobs import PushedJobs
from slurm_plugin.agent.trust import Peer
from slurm_plugin.helper.sample_source import AgentSamples


class AgentOverLink:
    """An agent's ops behind the link's `call` (a refusal raised as the client does)."""

    def __init__(self, agent: NodeAgent):
        self.agent = agent
        self.directory = lambda node: None

    def call(self, node, op, request=None, timeout=None):
        from slurm_plugin.agent.client import AgentRefused

        try:
            return dispatch(self.agent, op, request or {}, Peer(0, 0, 0))
        except (AgentError, ValueError) as exc:
            raise AgentRefused(f"agent of {node} refused {op}: {exc}") from exc


def test_a_helper_behind_the_agents_generation_counts_on_from_it(tmp_path):
    agent = NodeAgent("node1", tmp_path, SimGpuBackend(tmp_path / "sim", "node1", gpus=["H100-80GB"]),
                      list_running_jobs=PushedJobs())
    dispatch(agent, "jobs", {"job_ids": [], "generation": 5_000_000}, Peer(0, 0, 0))  # from before the clock jump
    source = AgentSamples(AgentOverLink(agent), clock=lambda: 1000.0)  # its clock: 1,000,000 ms
    source.tell_jobs({"node1": [7]})
    source(["node1"])
    assert agent.list_running_jobs() == {7}  # taken, generation 5,000,001
    assert agent.generations.newest("jobs") == 5_000_001
    assert "does not answer" not in source.stale.get("node1", "")
