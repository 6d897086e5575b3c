"""Where each host of the dev cluster lives: addresses, link and namespace names, hosts files
(pure builders; :mod:`slurm_plugin.devcluster.hosts` applies them).

In the multi-host layout the controller (the machine itself) and each node are separate
hosts on a bridge of their own. Every name and address derives from the cluster's port, so
clusters on other ports (other test clusters) sit beside it without sharing anything:

- the subnet is one /24 of the IPv4 link-local range 169.254.0.0/16 (RFC 3927: never routed
  off its link); the third octet comes from the port. 169.254.0.x and 169.254.255.x are
  reserved by the RFC, and 169.254.169.x holds the cloud metadata address, so none of
  those is used;
- the controller is .1, node i is .(100 + i), as node i's slurmd port is PORT + 100 + i in
  the one-host layout;
- the bridge is ``gpk<port>``, node i's host-side veth ``gpk<port>n<i>`` (the node side is
  ``eth0`` in its namespace), its network namespace ``gpk<port>-<node>`` (in ``ip netns``).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

ONE_HOST = "one-host"
MULTI_HOST = "multi-host"
TOPOLOGIES = (ONE_HOST, MULTI_HOST)
#: What `devcluster up` and the test cluster use unless told (`--one-host`, GPUPACK_TEST_TOPOLOGY).
DEFAULT_TOPOLOGY = MULTI_HOST

LOOPBACK = "127.0.0.1"
PREFIX_LEN = 24
CONTROLLER_HOST_PART = 1
NODE_HOST_BASE = 100  # node i is .(100 + i)
SRUN_PORT_OFFSETS = (470, 499)  # srun's ports on the controller host (SrunPortRange), reached by the nodes
IFNAME_MAX = 15  # Linux interface names: IFNAMSIZ - 1
#: The third octets a cluster's subnet may take: not 0 or 255 (reserved by RFC 3927), not 169
#: (169.254.169.254 is the cloud metadata service: routing it to the bridge would cut it off).
THIRD_OCTETS = tuple(o for o in range(1, 255) if o != 169)


def check_topology(value: str) -> str:
    if value not in TOPOLOGIES:
        raise ValueError(f"topology must be one of {', '.join(TOPOLOGIES)}, got {value!r}")
    return value


@dataclass(frozen=True)
class Network:
    """The multi-host cluster's bridge network, derived from its slurmctld port."""

    port: int

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port must be a TCP port, got {self.port}")

    @property
    def third_octet(self) -> int:
        return THIRD_OCTETS[self.port % len(THIRD_OCTETS)]

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"169.254.{self.third_octet}.0/{PREFIX_LEN}")

    def _host(self, part: int) -> str:
        return str(self.subnet.network_address + part)

    @property
    def controller_address(self) -> str:
        return self._host(CONTROLLER_HOST_PART)

    def node_address(self, index: int) -> str:
        """Node ``index`` (1-based) address."""
        if not 1 <= index <= 254 - NODE_HOST_BASE:
            raise ValueError(f"node index must be between 1 and {254 - NODE_HOST_BASE}, got {index}")
        return self._host(NODE_HOST_BASE + index)

    @property
    def bridge(self) -> str:
        return _ifname(f"gpk{self.port}")

    def veth(self, index: int) -> str:
        """The host-side end of node ``index``'s veth pair (on the bridge)."""
        return _ifname(f"gpk{self.port}n{index}")

    def netns(self, node: str) -> str:
        """The name node ``node``'s network namespace has in ``ip netns``."""
        return f"gpk{self.port}-{node}"

    @property
    def netns_prefix(self) -> str:
        return f"gpk{self.port}-"


def _ifname(name: str) -> str:
    if len(name) > IFNAME_MAX:
        raise ValueError(f"interface name {name!r} is longer than {IFNAME_MAX} characters")
    return name


def hosts_file(own_name: str, own_address: str, peers: list[tuple[str, str]]) -> str:
    """/etc/hosts of one host: its own name on its bridge address (never Debian's
    ``127.0.1.1 <hostname>`` line, which would make slurmd and munge name a loopback address),
    and every other host of the cluster, as a site's DNS would."""
    lines = ["# Written by `gpupack devcluster up` for this host of the dev cluster.",
             "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
             f"{own_address}\t{own_name}"]
    lines += [f"{address}\t{name}" for name, address in peers if name != own_name]
    return "\n".join(lines) + "\n"


def ip_batch_bridge(net: Network) -> list[str]:
    """`ip -batch` lines that make the cluster's bridge with the controller's address."""
    return [f"link add {net.bridge} type bridge",
            f"addr add {net.controller_address}/{PREFIX_LEN} dev {net.bridge}",
            f"link set {net.bridge} up"]


def ip_batch_node_link(net: Network, index: int, pid: int) -> list[str]:
    """`ip -batch` lines (run in the machine's namespace) that give node ``index``, whose
    namespaces the process ``pid`` holds, its veth: ``eth0`` inside, the other end on the bridge."""
    return [f"link add {net.veth(index)} type veth peer name eth0 netns {pid}",
            f"link set {net.veth(index)} master {net.bridge} up"]


def ip_batch_node_inside(net: Network, index: int) -> list[str]:
    """`ip -batch` lines run in node ``index``'s network namespace: ``lo`` up (a fresh
    namespace has it down), its address on ``eth0``. No default route: nothing leaves the bridge."""
    return ["link set lo up", f"addr add {net.node_address(index)}/{PREFIX_LEN} dev eth0", "link set eth0 up"]
