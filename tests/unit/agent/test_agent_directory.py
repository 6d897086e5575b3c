"""Where the helper finds each agent: the [agents] map first, else NodeAddr and [agent] port."""
from __future__ import annotations

import pytest

from packer.config import ConfigError
from slurm_plugin.agent.directory import AgentAddress, AgentDirectory, node_addr_in_conf
from slurm_plugin.config.whole import load_agent_settings


def test_the_map_wins_and_nodeaddr_with_the_port_does_the_rest(tmp_path):
    toml = tmp_path / "gpupack.toml"
    toml.write_text('[agent]\nport = 7000\n[agents]\nnode1 = "127.0.0.1:20718"\n')
    settings = load_agent_settings(toml)
    asked = []

    def node_addrs():
        asked.append(1)
        return {"node1": "10.0.0.1", "node2": "10.0.0.2"}

    directory = AgentDirectory(settings, node_addrs)
    assert directory("node1") == AgentAddress("127.0.0.1", 20718)
    assert directory("node2") == AgentAddress("10.0.0.2", 7000)
    assert directory("node2") == AgentAddress("10.0.0.2", 7000) and len(asked) == 1  # cached
    assert directory("node9") is None
    assert directory.nodes() == ["node1", "node2"]


def test_bad_settings_say_what_is_wrong(tmp_path):
    toml = tmp_path / "gpupack.toml"
    toml.write_text('[agents]\nnode1 = "127.0.0.1"\n')
    with pytest.raises(ConfigError, match=r"\[agents\] node1 must be \"host:port\""):
        load_agent_settings(toml)
    toml.write_text("[agent]\nprot = 1\n")
    with pytest.raises(ConfigError, match="unknown"):
        load_agent_settings(toml)
    assert load_agent_settings(tmp_path / "missing.toml").port == 6820


def test_an_agent_binds_its_nodeaddr_from_slurm_conf(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("NodeName=gpu[1-2] NodeAddr=169.254.0.[11-12] Port=6818\n")
    assert node_addr_in_conf("gpu2", conf) == "169.254.0.12"
    assert load_agent_settings(None).own_address("gpu1", conf) == AgentAddress("169.254.0.11", 6820)
