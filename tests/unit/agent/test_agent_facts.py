"""What an agent tells the helper it must agree with: gres.conf's shards and types for its node,
its GPUs, its versions; a digest that changes when gres.conf does or the agent restarts."""
from __future__ import annotations

import os

from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.facts import LINK_PROTOCOL, NodeFacts, node_gres, read_node_gres
from slurm_plugin.agent.ops import dispatch
from slurm_plugin.agent.trust import Peer

GRES = """# a comment
NodeName=node[1-2] AutoDetect=off Name=gpu Type=h100 File=/dev/nvidia[0-1]
NodeName=node[1-2] Name=shard Type=h100 Count=8 File=/dev/nvidia0
NodeName=node2 Name=shard Type=h100 Count=8 File=/dev/nvidia1
NodeName=node1 Name=shard Type=h100 Count=8 File=/dev/nvidia1
NodeName=node3 Name=gpu Type=a100 File=/dev/nvidia0
NodeName=node3 Name=shard Count=14 File=/dev/nvidia[0-1]
"""


def test_gres_conf_gives_each_node_its_types_and_shards_per_gpu():
    assert node_gres(GRES, "node1") == node_gres(GRES, "node2")
    g = node_gres(GRES, "node1")
    assert (g.gpu_types, g.shards_per_gpu, g.error) == (("h100",), (8,), None)
    g3 = node_gres(GRES, "node3")  # a Count spread over two devices: 7 each
    assert (g3.gpu_types, g3.shards_per_gpu) == (("a100",), (7,))
    assert node_gres(GRES, "node9").shards_per_gpu == ()  # no line for it


def test_lines_without_nodename_apply_to_every_node_and_bad_counts_are_errors():
    assert node_gres("Name=shard Count=4 File=/dev/nvidia0\n", "nodeX").shards_per_gpu == (4,)
    assert "does not divide" in node_gres("Name=shard Count=5 File=/dev/nvidia[0-1]\n", "n").error
    assert "not a number" in node_gres("Name=shard Count=lots\n", "n").error


def test_an_unreadable_gres_conf_is_said_not_guessed(tmp_path):
    g = read_node_gres(tmp_path / "missing.conf", "node1")
    assert g.error and "cannot read" in g.error and g.shards_per_gpu == ()


def test_hello_tells_the_facts_and_the_samples_digest_follows_gres_conf_and_restarts(tmp_path):
    gres = tmp_path / "gres.conf"
    gres.write_text(GRES)
    backend = SimGpuBackend(tmp_path / "sim", "node1", gpus=["H100-80GB", "H100-80GB"])
    clock = [1000.0]
    agent = NodeAgent("node1", tmp_path, backend, gres_conf=gres, clock=lambda: clock[0])
    root = Peer(0, 0, 0)
    hello = dispatch(agent, "hello", {}, root)
    facts = NodeFacts.from_dict(hello["facts"])
    assert facts.protocol == LINK_PROTOCOL and facts.node == "node1"
    assert [g.model for g in facts.gpus] == ["H100-80GB", "H100-80GB"]
    assert facts.shares_per_gpu is None  # not told: the GPU model's own (gres.conf is what is checked)
    assert facts.gres.shards_per_gpu == (8,) and facts.gres.gpu_types == ("h100",)
    digest = dispatch(agent, "samples", {}, root)["facts"]
    assert digest == hello["digest"]
    gres.write_text(GRES.replace("Count=8", "Count=4"))
    os.utime(gres, ns=(1, 1))  # another modification time, whatever the file system's resolution
    assert dispatch(agent, "samples", {}, root)["facts"] != digest
    assert NodeFacts.from_dict(dispatch(agent, "hello", {}, root)["facts"]).gres.shards_per_gpu == (4,)
    clock[0] += 5  # the agent restarts: the helper must ask again
    again = NodeAgent("node1", tmp_path, backend, gres_conf=gres, clock=lambda: clock[0])
    assert dispatch(again, "samples", {}, root)["facts"] != dispatch(agent, "samples", {}, root)["facts"]
