"""Where the endpoints listen: ports derived from the cluster's slurm.conf, overrides, errors."""
from __future__ import annotations

import pytest

from packer.config import ConfigError
from slurm_plugin.metrics.ports import Address, agent_port, helper_ports, slurmctld_port, slurmd_port
from slurm_plugin.metrics.settings import MetricsOverride, load_metrics_settings

CONF = """# a dev cluster
SlurmctldPort=55817
NodeName=node1 NodeAddr=127.0.0.1 Port=55918 CPUs=16
NodeName=node[2-3] NodeAddr=127.0.0.1 Port=55919
"""


def test_ports_follow_the_clusters_own(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text(CONF)
    assert slurmctld_port(CONF) == 55817 and slurmd_port(CONF, "node1") == 55918
    assert slurmd_port(CONF, "node3") == 55919
    assert helper_ports(conf) == (55837, 55838)
    assert agent_port(conf, "node1") == 56118
    # Slurm's defaults where slurm.conf says nothing, or is missing
    assert slurmctld_port("SlurmctldPort=6817-6818\n") == 6817 and slurmd_port("", "n") == 6818
    assert helper_ports(tmp_path / "missing.conf") == (6837, 6838)


def test_two_clusters_side_by_side_never_share_a_port(tmp_path):
    ports = []
    for base in (55817, 56817):
        conf = tmp_path / f"{base}.conf"
        conf.write_text("\n".join([f"SlurmctldPort={base}"] + [f"NodeName=node{i} Port={base + 100 + i}" for i in range(1, 65)]))
        ports += [*helper_ports(conf), *(agent_port(conf, f"node{i}") for i in range(1, 65))]
        ports += [base, *(base + 100 + i for i in range(1, 65))]  # Slurm's own
    assert len(ports) == len(set(ports))


def test_settings_and_command_line_override(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text(CONF)
    toml = tmp_path / "gpupack.toml"
    toml.write_text('[metrics]\naddress = "0.0.0.0"\nwatch_port = 0\nagent_address = "10.1.2.3"\n')
    assert MetricsOverride().submit(toml, conf) == Address("0.0.0.0", 55837)
    assert MetricsOverride().agent(toml, conf, "node2") == Address("10.1.2.3", 56119)
    assert MetricsOverride(None, 9200).agent(toml, conf, "node2") == Address("10.1.2.3", 9200)
    assert MetricsOverride().agent(tmp_path / "none.toml", conf, "node1") == Address("127.0.0.1", 56118)
    assert not MetricsOverride().watch(toml, conf).enabled
    assert MetricsOverride("127.0.0.2", 9100).submit(toml, conf) == Address("127.0.0.2", 9100)
    assert MetricsOverride("127.0.0.2", 9100).for_watcher() == ["--metrics-address", "127.0.0.2", "--metrics-port", "9101"]
    assert MetricsOverride(None, 0).for_watcher() == ["--metrics-port", "0"]
    assert Address("0.0.0.0", 9100).url == "http://127.0.0.1:9100/metrics"


@pytest.mark.parametrize("table, message", [
    ('[metrics]\naddress = "localhost"\n', "must be an IP address"),
    ("[metrics]\nsubmit_port = 70000\n", "submit_port = 70000 is not allowed: a whole number or unset, >= 0 and <= 65535"),
    ("[metrics]\nport = 1\n", "unknown \\[metrics\\] keys"),
])
def test_bad_settings_say_what_to_change(tmp_path, table, message):
    toml = tmp_path / "gpupack.toml"
    toml.write_text(table)
    with pytest.raises(ConfigError, match=message):
        load_metrics_settings(toml)


def test_the_old_monitor_key_points_to_the_new_table(tmp_path):
    from slurm_plugin.helper.monitor_settings import load_monitor_settings

    toml = tmp_path / "gpupack.toml"
    toml.write_text("[monitor]\nmetrics_port = 9100\n")
    with pytest.raises(ConfigError, match="moved to the \\[metrics\\] table"):
        load_monitor_settings(toml)
