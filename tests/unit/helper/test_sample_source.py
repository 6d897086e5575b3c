"""The helper reads every agent sample once, even when its rounds are slow; a node whose agent
is silent or behind is stale until it answers again with fresh samples."""
from __future__ import annotations

from packer.samples import JobSample
from slurm_plugin.agent.client import AgentUnavailable
from slurm_plugin.helper.sample_source import AgentSamples


class FakeLink:
    """What AgentSamples asks of an AgentLink: ``call(node, op, request, timeout)``."""

    def __init__(self, taken: list[JobSample]):
        self.taken = taken
        self.now = 0  # how many of ``taken`` the agent has sampled
        self.asked: list[tuple] = []
        self.pushed: list[tuple] = []
        self.down = False
        self.sampled_age = 1.0
        self.directory = lambda node: None

    def call(self, node, op, request=None, timeout=None):
        if self.down:
            raise AgentUnavailable(f"agent of {node}: connection refused")
        if op == "jobs":
            self.pushed.append((node, request["job_ids"], request["generation"]))
            self.outputs = getattr(self, "outputs", {})
            self.outputs[node] = request.get("outputs")
            return {"status": "ok"}
        assert op == "samples"
        since = request.get("since")
        self.asked.append((node, request["latest"], since))
        mine = [s.to_dict() for s in self.taken[:self.now] if since is None or s.at > since]
        return {"status": "ok", "samples": mine[-1:] if request["latest"] else mine,
                "sampled_at": 100.0 - self.sampled_age, "now": 100.0}


def test_newest_first_then_every_sample_since_the_last_seen():
    link = FakeLink([JobSample(7, "node1", 0, float(t), 1, 1) for t in range(10)])
    source = AgentSamples(link)
    link.now = 3
    assert [s.at for s in source(["node1"])] == [2.0]  # the newest, the first time
    link.now = 8  # a slow round: five samples were taken meanwhile
    assert [s.at for s in source(["node1"])] == [3.0, 4.0, 5.0, 6.0, 7.0]
    assert [s.at for s in source(["node1"])] == []  # nothing new
    assert link.asked == [("node1", True, None), ("node1", False, 2.0), ("node1", False, 7.0)]
    assert source.stale == {}


def test_each_round_pushes_the_nodes_job_lists_with_a_rising_generation():
    link = FakeLink([])
    source = AgentSamples(link, clock=lambda: 5.0)  # a clock that stands still: generations still rise
    source.tell_jobs({"node1": [7, 8]})
    source(["node1"])
    source.tell_jobs({"node1": [8]})
    source(["node1", "node2"])  # node2 runs nothing: it is told so (its agent frees what it holds)
    pushed = sorted(link.pushed, key=lambda p: (p[0], p[1]))  # one call asks its nodes in parallel
    assert [(n, j) for n, j, _ in pushed] == [("node1", [7, 8]), ("node1", [8]), ("node2", [])]
    generations = [g for _, _, g in pushed]
    assert generations[0] < generations[1] == generations[2]


def test_a_silent_or_behind_agent_makes_its_node_stale_until_it_answers_fresh():
    link = FakeLink([JobSample(7, "node1", 0, 1.0, 1, 1)])
    link.now = 1
    source = AgentSamples(link, stale_after_s=15.0)
    source(["node1"])
    assert source.stale == {}
    link.down = True
    assert source(["node1"]) == []
    assert "does not answer" in source.stale["node1"]
    link.down, link.sampled_age = False, 40.0  # it answers, but its sampler is stuck
    source(["node1"])
    assert "40 s old" in source.stale["node1"]
    link.sampled_age = 1.0
    source(["node1"])
    assert source.stale == {}


def test_the_job_lists_carry_where_each_job_writes_its_output():
    link = FakeLink([])
    source = AgentSamples(link, clock=lambda: 5.0)
    source.tell_outputs({"node1": {7: {"uid": 1000, "paths": ["/home/ana/slurm-7.out"]}}})
    source.tell_jobs({"node1": [7], "node2": [9]})
    source(["node1", "node2"])
    assert link.outputs == {"node1": {"7": {"uid": 1000, "paths": ["/home/ana/slurm-7.out"]}}, "node2": None}


def test_the_push_carries_slurms_record_of_each_jobs_gpus():
    """Issue 33: the agent checks a step's own variables against the controller's record."""
    requests: list[dict] = []
    link = FakeLink([])
    real = link.call

    def call(node, op, request=None, timeout=None):
        if op == "jobs":
            requests.append(request)
        return real(node, op, request, timeout)

    link.call = call
    source = AgentSamples(link, clock=lambda: 5.0)
    source.tell_jobs({"node1": [7, 8]}, {"node1": {7: (1,)}})
    source(["node1"])
    assert requests[0]["gpus"] == {"7": [1]}
