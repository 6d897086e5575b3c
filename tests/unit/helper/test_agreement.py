"""The helper and each agent agree on shares per GPU, GPU type and versions; a node that
disagrees is stale for that reason (nothing packed, no action), with an event and a metric,
and recovers once fixed."""
from __future__ import annotations

from dataclasses import replace

from packer.samples import JobSample
from slurm_plugin.agent.client import AgentRefused
from slurm_plugin.agent.facts import LINK_PROTOCOL, GpuFact, NodeFacts, NodeGres
from slurm_plugin.helper.agreement import Agreement, Expected, disagreements, log_agreement_events
from slurm_plugin.helper.sample_source import AgentSamples

WANT = Expected(shares_per_gpu=8, gpu_type="h100", version="1.2.0", protocol=LINK_PROTOCOL)
H100 = GpuFact(0, "H100-80GB", "NVIDIA H100 80GB HBM3", 81559)
GOOD = NodeFacts("node1", LINK_PROTOCOL, "1.2.0", 1000.0, (H100, replace(H100, index=1)), None,
                 NodeGres("/etc/slurm/gres.conf", ("h100",), (8,)))


def test_facts_that_match_agree():
    assert disagreements(GOOD, WANT) == []
    assert disagreements(GOOD, replace(WANT, gpu_type="")) == []  # any type


def test_each_disagreement_is_named():
    shares = disagreements(replace(GOOD, gres=replace(GOOD.gres, shards_per_gpu=(4,))), WANT)
    assert shares == ["4 shards per GPU in its gres.conf (/etc/slurm/gres.conf), [packer] shares_per_gpu = 8"]
    assert "agent places 7" in disagreements(replace(GOOD, shares_per_gpu=7), WANT)[0]
    assert "suite version 1.1.0" in disagreements(replace(GOOD, version="1.1.0"), WANT)[0]
    assert "link protocol 0" in disagreements(replace(GOOD, protocol=0), WANT)[0]
    typed = disagreements(replace(GOOD, gres=replace(GOOD.gres, gpu_types=("a100",))), WANT)
    assert any("[packer] gpu_type = 'h100'" in r for r in typed)
    assert any("Type=a100 but its GPUs are H100-80GB" in r for r in typed)
    unread = disagreements(replace(GOOD, gres=NodeGres("/x/gres.conf", error="cannot read it: No such file")), WANT)
    assert unread == ["its gres.conf (/x/gres.conf) cannot be checked: cannot read it: No such file"]
    assert "no shards" in disagreements(replace(GOOD, gres=replace(GOOD.gres, shards_per_gpu=())), WANT)[0]


class FactsLink:
    """An agent over the link: samples carry a digest of its facts, hello tells them."""

    def __init__(self, facts: NodeFacts):
        self.facts = facts
        self.digest = "d1"
        self.hellos = 0
        self.old_agent = False
        self.directory = lambda node: None

    def call(self, node, op, request=None, timeout=None):
        if op == "jobs":
            return {"status": "ok"}
        if op == "hello":
            self.hellos += 1
            if self.old_agent:
                raise AgentRefused("agent of node1 refused hello: no such command")
            return {"status": "ok", "facts": self.facts.to_dict(), "digest": self.digest}
        assert op == "samples"
        return {"status": "ok", "samples": [JobSample(7, node, 0, 99.0, 1, 1).to_dict()], "sampled_at": 99.0,
                "now": 100.0, **({} if self.old_agent else {"facts": self.digest})}


def source_for(link: FactsLink, want: list[Expected]) -> tuple[AgentSamples, Agreement]:
    from slurm_plugin.agent.client import node_facts

    agreement = Agreement(lambda node: node_facts(link, node), lambda: want[0])
    return AgentSamples(link, agreement=agreement), agreement


def test_a_node_that_disagrees_is_stale_until_fixed_and_facts_are_asked_only_when_they_change():
    link = FactsLink(replace(GOOD, gres=replace(GOOD.gres, shards_per_gpu=(4,))))
    source, agreement = source_for(link, [WANT])
    got = source(["node1"])
    assert [s.job_id for s in got] == [7]  # its samples still count (they are measured, not planned)
    assert "disagrees with the helper: 4 shards per GPU" in source.stale["node1"]
    source(["node1"])
    assert link.hellos == 1  # the same digest: not asked again
    link.facts, link.digest = GOOD, "d2"  # gres.conf fixed on the node: the digest moves
    source(["node1"])
    assert link.hellos == 2 and source.stale == {} and agreement.disagree == {}
    events = []
    log_agreement_events(agreement, lambda kind, detail, **data: events.append((kind, data["nodes"])))
    assert events == [("node-disagrees", ["node1"]), ("node-agrees", ["node1"])]
    log_agreement_events(agreement, lambda *a, **k: events.append(a))
    assert len(events) == 2  # each change told once


def test_a_reloaded_gpupack_toml_is_checked_again_without_asking_the_agent():
    link = FactsLink(GOOD)
    want = [WANT]
    source, _ = source_for(link, want)
    source(["node1"])
    assert source.stale == {}
    want[0] = replace(WANT, shares_per_gpu=7)  # the admin changed [packer] shares_per_gpu
    source(["node1"])
    assert "shares_per_gpu = 7" in source.stale["node1"] and link.hellos == 1


def test_an_agent_that_tells_no_facts_disagrees():
    link = FactsLink(GOOD)
    link.old_agent = True
    source, agreement = source_for(link, [WANT])
    source(["node1"])
    assert "tells no facts" in source.stale["node1"]
    assert agreement.disagree["node1"]


def test_the_metric_names_each_disagreement():
    from slurm_plugin.metrics.watcher import MonitorCollector

    link = FactsLink(replace(GOOD, version="0.9"))
    source, agreement = source_for(link, [WANT])
    source(["node1"])

    class Monitor:
        rounds, tracks, _heading = 1, {}, {}
        kill_switch = type("K", (), {"on": False})()

    m = Monitor()
    m.agreement = agreement
    (family,) = [f for f in MonitorCollector(m).collect() if f.name == "gpupack_node_disagrees"]
    assert [(s.labels["node"], s.value) for s in family.samples] == [("node1", 1)]
    assert "suite version 0.9" in family.samples[0].labels["why"]


def test_an_agent_not_told_its_shares_follows_the_model_and_is_judged_by_gres_conf_alone():
    assert disagreements(replace(GOOD, shares_per_gpu=None), replace(WANT, shares_per_gpu=8)) == []
    assert disagreements(replace(GOOD, shares_per_gpu=8), WANT) == []
