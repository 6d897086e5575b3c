"""The multi-host dev cluster's pure builders: addresses, names, hosts files, slurm.conf lines."""
from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from slurm_plugin.devcluster import spec as specmod
from slurm_plugin.devcluster import topology as topo
from slurm_plugin.devcluster.hosts import node_plan
from slurm_plugin.devcluster.spec import ClusterSpec
from slurm_plugin.metrics.ports import agent_port, slurmd_port

LINK_LOCAL = ipaddress.IPv4Network("169.254.0.0/16")


def multi(port: int = 18817, nodes: int = 3) -> ClusterSpec:
    return ClusterSpec(state_dir=Path("/var/tmp/mh"), port=port, nodes=nodes, topology=topo.MULTI_HOST)


def test_each_cluster_gets_a_link_local_24_from_its_port_never_a_reserved_or_the_metadata_one():
    seen = {}
    for port in range(1024, 65536):
        net = topo.Network(port).subnet
        assert net.subnet_of(LINK_LOCAL) and net.prefixlen == 24
        assert net.network_address.packed[2] not in (0, 169, 255), port
        seen.setdefault(net, port)
    assert len(seen) == 253  # every usable /24 is used by some port
    # the project's own clusters (dev/test cluster of the host and of each root) all differ
    ports = [16817, 17817, 26817, 27817, 36817, 37817, 46817, 47817]
    assert len({topo.Network(p).subnet for p in ports}) == len(ports)


def test_controller_and_nodes_addresses_lie_in_the_subnet_and_differ():
    net = topo.Network(18817)
    addresses = [net.controller_address] + [net.node_address(i) for i in range(1, 65)]
    assert len(set(addresses)) == 65
    assert all(ipaddress.ip_address(a) in net.subnet for a in addresses)
    assert net.controller_address.endswith(".1") and net.node_address(3).endswith(".103")
    with pytest.raises(ValueError):
        net.node_address(0)


def test_link_and_namespace_names_derive_from_the_port_and_fit_linux_limits():
    a, b = topo.Network(18817), topo.Network(19317)
    assert a.bridge == "gpk18817" and a.veth(64) == "gpk18817n64" and a.netns("node1") == "gpk18817-node1"
    assert {a.bridge, a.veth(1)}.isdisjoint({b.bridge, b.veth(1)})
    assert all(len(n) <= topo.IFNAME_MAX for n in (topo.Network(65535).bridge, topo.Network(65535).veth(64)))


def test_spec_addresses_follow_the_topology():
    one = ClusterSpec(state_dir=Path("/x"), port=18817)
    assert one.topology == topo.ONE_HOST and one.node_address("node2") == "127.0.0.1"
    assert [one.node_port(i) for i in (1, 2)] == [18918, 18919]
    m = multi()
    assert m.node_address("node2") == topo.Network(18817).node_address(2)
    assert m.controller_address == topo.Network(18817).controller_address
    assert [m.node_port(i) for i in (1, 2, 3)] == [18918] * 3  # one SlurmdPort: every node its own address
    with pytest.raises(ValueError, match="topology"):
        ClusterSpec(topology="two-host")


def test_hosts_file_names_each_host_on_its_bridge_address_without_debians_loopback_line():
    text = topo.hosts_file("node2", "169.254.9.102", [("ctl", "169.254.9.1"), ("node1", "169.254.9.101"),
                                                       ("node2", "169.254.9.102")])
    lines = [line.split("\t") for line in text.splitlines() if not line.startswith("#")]
    names = {n: a for a, n in lines}
    assert names["node2"] == "169.254.9.102" and names["ctl"] == "169.254.9.1" and names["node1"] == "169.254.9.101"
    assert "127.0.1.1" not in text
    assert sum(1 for a, n in lines if n == "node2") == 1


def test_multi_host_slurm_conf_puts_the_controller_and_every_node_on_bridge_addresses(tmp_path):
    m = multi()
    conf = specmod.slurm_conf(m, "ctlhost", "slurm", Path("/e"), 7)
    net = topo.Network(18817)
    assert f"SlurmctldHost=ctlhost({net.controller_address})" in conf
    for i, node in enumerate(m.node_names, start=1):
        assert f"NodeName={node} NodeHostname={node} NodeAddr={net.node_address(i)} " in conf
    assert "SrunPortRange=19287-19316" in conf and "127.0.0.1" not in conf
    path = tmp_path / "slurm.conf"
    path.write_text(conf)
    # the metrics ports read the same file: the same slurmd (and agent metrics) port on every node
    assert {slurmd_port(conf, n) for n in m.node_names} == {18918}
    assert {agent_port(path, n) for n in m.node_names} == {19118}


def test_one_host_slurm_conf_is_unchanged():
    conf = specmod.slurm_conf(ClusterSpec(state_dir=Path("/x"), port=18817), "h", "slurm", Path("/e"), 7)
    assert "SlurmctldHost=h(127.0.0.1)" in conf and "SrunPortRange" not in conf and "SlurmdPort" not in conf
    assert "NodeName=node2 NodeHostname=h NodeAddr=127.0.0.1 Port=18919 " in conf


def test_multi_host_gpupack_toml_binds_agent_metrics_on_the_nodes_addresses(tmp_path):
    from slurm_plugin.metrics.settings import load_metrics_settings

    for s, wanted in ((multi(), "0.0.0.0"), (ClusterSpec(state_dir=Path("/x")), "127.0.0.1")):
        path = tmp_path / "gpupack.toml"
        path.write_text(specmod.gpupack_toml(s, 7, 79.6))
        assert load_metrics_settings(path).agent_address == wanted


def test_ip_batches_wire_a_node_to_the_bridge_with_lo_up_and_no_default_route():
    net = topo.Network(18817)
    assert topo.ip_batch_bridge(net)[1] == f"addr add {net.controller_address}/24 dev gpk18817"
    assert topo.ip_batch_node_link(net, 2, 4242) == [
        "link add gpk18817n2 type veth peer name eth0 netns 4242", "link set gpk18817n2 master gpk18817 up"]
    inside = topo.ip_batch_node_inside(net, 2)
    assert "link set lo up" in inside and f"addr add {net.node_address(2)}/24 dev eth0" in inside
    assert not any("route" in line for line in inside)


def test_a_node_sees_only_its_own_private_and_device_folders():
    m = multi()
    plan = node_plan(m, "node2", "ctlhost")
    assert plan["hostname"] == "node2" and "dev/node2" in plan["shared_ro"]
    assert "spool/node2" in plan["private"] and "run" in plan["private"]
    shown = set(plan["shared_ro"]) | set(plan["shared_rw"]) | set(plan["private"])
    # nothing of the controller (store, ctld state, the run folder underneath) nor of other nodes
    assert not any(p.startswith(("ctld", "dev/node1", "spool/node1", "gpupack.db")) for p in shown)
    assert "169.254." in plan["hosts"] and "ctlhost" in plan["hosts"]


def test_forward_filter_note_speaks_only_when_bridged_packets_may_be_dropped(tmp_path):
    from slurm_plugin.devcluster.hosts import forward_filter_note

    sysctl = tmp_path / "bridge-nf-call-iptables"
    assert forward_filter_note("gpk1", sysctl, drops=True) == ""  # br_netfilter not loaded
    sysctl.write_text("0\n")
    assert forward_filter_note("gpk1", sysctl, drops=True) == ""
    sysctl.write_text("1\n")
    assert forward_filter_note("gpk1", sysctl, drops=False) == ""
    note = forward_filter_note("gpk1", sysctl, drops=True)
    assert "br_netfilter" in note and "DROP" in note and "iptables -I FORWARD -i gpk1 -o gpk1 -j ACCEPT" in note


def test_no_exit_code_a_job_can_choose_requeues_it():
    """Issue 33, attack 2: RequeueExit=117 requeued every job that exited 117 by itself; the helper
    now requeues an unisolated packed step on root's record only. The SPANK plugin gets the spool."""
    from slurm_plugin.devcluster import node_side

    spec = ClusterSpec(state_dir=Path("/x"), port=18817)
    conf = specmod.slurm_conf(spec, "h", "slurm", Path("/e"), 7)
    assert "RequeueExit" not in conf
    (line,) = node_side.plugstack_lines(spec)
    assert "spool=/x/agent/%n/unisolated" in line
