"""The multi-host layout's hosts: the cluster's bridge, one holder process per node (its
network, UTS and mount namespaces, see :mod:`~slurm_plugin.devcluster.holder`), the veth
that puts each node on the bridge, and ``nsenter`` to start a node's daemons in them.

util-linux ``unshare``/``nsenter`` and iproute2's ``ip`` do the work; no container runtime.
Each node's network namespace is also named in ``ip netns`` (``gpk<port>-<node>``) so an
admin can look inside (``ip netns exec gpk16817-node1 ss -ltn``); ``ip netns exec`` makes a
new mount namespace on every call, so the cluster itself never starts a daemon that way.
"""
from __future__ import annotations

import ipaddress
import json
import logging
import os
import select
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from slurm_plugin.devcluster import topology
from slurm_plugin.devcluster.errors import DevClusterError
from slurm_plugin.devcluster.processes import Process, terminate
from slurm_plugin.devcluster.spec import ClusterSpec

log = logging.getLogger(__name__)

__all__ = ["NodeHosts", "forward_filter_note", "node_plan"]

HOLDER_READY_S = 20.0
NETNS_DIR = Path("/run/netns")
#: A node's own folders (tmpfs in its mount namespace, mode), relative to the state folder.
PRIVATE = {"run": "755", "agent": "755", "mps": "755", "simgpu": "777"}
SHARED_RO = ("etc", "spank")  # the cluster's configuration and the SPANK build, as a site installs them
BRIDGE_NF_CALL = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
SHARED_RW = ("log",)  # the logs stay in one place, as a site's central logging would have them
#: GPUPACK_DEVCLUSTER_CGROUP=v2: the nodes hide the cgroup v1 devices hierarchy, so on a hybrid
#: host their SPANK plugin fences with a cgroup v2 BPF device program (docs/fence.md)
NODE_CGROUP_KINDS = ("", "v2")


def node_plan(spec: ClusterSpec, node: str, controller_name: str) -> dict:
    """What node ``node``'s holder makes (see :mod:`~slurm_plugin.devcluster.holder`)."""
    peers = [(controller_name, spec.controller_address)] + [(n, spec.node_address(n)) for n in spec.node_names]
    cgroup = os.environ.get("GPUPACK_DEVCLUSTER_CGROUP", "")
    if cgroup not in NODE_CGROUP_KINDS:
        raise DevClusterError(f"GPUPACK_DEVCLUSTER_CGROUP={cgroup!r}: expected 'v2' (nodes without the cgroup v1 "
                              "devices hierarchy) or nothing")
    return {
        "state_dir": str(spec.state_dir), "hostname": node,
        "hosts": topology.hosts_file(node, spec.node_address(node), peers),
        "shared_ro": [*SHARED_RO, str(spec.device_dir(node).relative_to(spec.state_dir))],
        "shared_rw": list(SHARED_RW),
        "private": {**PRIVATE, f"spool/{node}": "755"}, "private_size": "64m",
        "owners": {"run/munge": "munge"}, "etc_scratch": "run/etc",
        "hide_v1_devices": cgroup == "v2",
    }


class NodeHosts:
    """Starts and stops the nodes' hosts and their network; knows how to enter each."""

    def __init__(self, spec: ClusterSpec):
        self.spec = spec
        self.net = topology.Network(spec.port)
        self.holders: dict[str, int] = {}

    # -- entering a node -----------------------------------------------------------------
    def enter(self, node: str) -> list[str]:
        """The command prefix that runs a program on ``node``: in its holder's namespaces,
        with its root (a Debian root's chroot) and working folder."""
        return ["nsenter", "-t", str(self.holders[node]), "--net", "--uts", "--mount", "--root", "--wd", "--"]

    def path_on(self, node: str, path: Path) -> Path:
        """``path`` as ``node`` sees it, read from here (through its holder's root)."""
        return Path(f"/proc/{self.holders[node]}/root") / Path(path).relative_to("/")

    # -- up ------------------------------------------------------------------------------
    def start(self, running: dict[tuple[str, str], Process], procs: list[Process], save) -> None:
        """Bring up the bridge and every node's host not already running (registered as
        role ``host``, so `down` stops them); ``save`` writes the registry."""
        self.holders = {n: running[("host", n)].pid for n in self.spec.node_names if ("host", n) in running}
        new = [n for n in self.spec.node_names if n not in self.holders]
        if not new and self._link_exists(self.net.bridge):
            return
        self._check_subnet_free()
        self._clear(new)
        started = {node: self._spawn_holder(node) for node in new}
        for node, proc in started.items():  # registered at once: `down` stops them if one fails
            procs.append(Process("host", node, proc.pid, self._marker, host=node))
        save(procs)
        for node, proc in started.items():
            self._await_ready(node, proc)
            self.holders[node] = proc.pid
        self._wire(new)

    @property
    def _marker(self) -> str:
        return str(self.spec.state_dir)

    def _spawn_holder(self, node: str) -> subprocess.Popen:
        plan = self.spec.run / "hosts" / f"{node}.json"
        plan.parent.mkdir(parents=True, exist_ok=True)
        plan.write_text(json.dumps(node_plan(self.spec, node, socket.gethostname()), indent=1))
        logfile = open(self.spec.log / f"host-{node}.log", "ab")
        argv = ["unshare", "--net", "--uts", "--mount", "--propagation", "unchanged", "--",
                sys.executable, "-m", "slurm_plugin.devcluster.holder", str(plan)]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=logfile, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd="/")

    def _await_ready(self, node: str, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], HOLDER_READY_S)
        line = proc.stdout.readline().decode(errors="replace").strip() if ready else ""
        proc.stdout.close()
        if line != "ready":
            if proc.poll() is None:
                terminate(proc.pid, self._marker)
            why = line or f"no answer in {HOLDER_READY_S:.0f}s"
            raise DevClusterError(f"node {node}'s host did not start ({why}); see {self.spec.log}/host-{node}.log")

    def _wire(self, nodes: list[str]) -> None:
        """The bridge (when missing), then each new node's veth and its address inside."""
        lines = [] if self._link_exists(self.net.bridge) else topology.ip_batch_bridge(self.net)
        for node in nodes:
            _name_netns(self.net.netns(node), self.holders[node])
            lines += topology.ip_batch_node_link(self.net, self.spec.node_names.index(node) + 1, self.holders[node])
        _ip_batch(lines)
        for node in nodes:
            index = self.spec.node_names.index(node) + 1
            _ip_batch(topology.ip_batch_node_inside(self.net, index), inside=self.holders[node])

    def _check_subnet_free(self) -> None:
        for link in _ip_json("addr"):
            for info in link.get("addr_info", []):
                if info.get("family") != "inet" or link["ifname"] == self.net.bridge:
                    continue
                if ipaddress.ip_address(info["local"]) in self.net.subnet:
                    raise DevClusterError(
                        f"{self.net.subnet} (this cluster's, from port {self.spec.port}) is already on "
                        f"{link['ifname']}: another cluster's port maps to the same subnet; choose another --port")

    def _clear(self, nodes: list[str]) -> None:
        """What a crashed run left of these nodes: their netns name and veth."""
        for n in nodes:
            _unname_netns(self.net.netns(n))
        links = _link_names()
        lines = [f"link del {self.net.veth(self.spec.node_names.index(n) + 1)}" for n in nodes
                  if self.net.veth(self.spec.node_names.index(n) + 1) in links]
        if lines:
            _ip_batch(lines, force=True)

    @staticmethod
    def _link_exists(name: str) -> bool:
        return Path("/sys/class/net", name).exists()

    # -- down ----------------------------------------------------------------------------
    def remove_network(self) -> list[str]:
        """Remove the cluster's netns names, veths and bridge (after its holders stopped)."""
        self.holders = {}
        prefix = self.net.netns_prefix
        names = sorted(p.name for p in NETNS_DIR.glob(prefix + "*")) if NETNS_DIR.is_dir() else []
        veth_prefix = self.net.veth(1)[:-1]
        links = _link_names()
        veths = sorted(n for n in links if n.startswith(veth_prefix) and n[len(veth_prefix):].isdigit())
        for name in names:
            _unname_netns(name)
        lines = [f"link del {v}" for v in veths]
        lines += [f"link del {self.net.bridge}"] if self.net.bridge in links else []
        if lines:
            _ip_batch(lines, force=True)
        return [f"netns:{n}" for n in names] + [f"link:{v}" for v in veths] + (
            [f"link:{self.net.bridge}"] if self.net.bridge in links else [])

    def leftovers(self) -> list[str]:
        """What of this cluster's network still exists (empty after `down`)."""
        names = [p.name for p in NETNS_DIR.glob(self.net.netns_prefix + "*")] if NETNS_DIR.is_dir() else []
        veth_prefix = self.net.veth(1)[:-1]
        links = [n for n in _link_names() if n == self.net.bridge or n.startswith(veth_prefix)]
        return sorted(names + links)


def forward_filter_note(bridge: str, sysctl: Path = BRIDGE_NF_CALL, drops=None) -> str:
    """A sentence when bridged packets between nodes may be dropped by the firewall
    (``br_netfilter`` loaded and a FORWARD policy of DROP), "" when they are not.
    ``drops`` says whether the FORWARD policy drops (True/False, None: unknown); read
    from iptables or nft when not given."""
    try:
        calls = sysctl.read_text().strip()
    except OSError:
        return ""  # br_netfilter not loaded: bridged packets bypass iptables
    if calls != "1":
        return ""
    drop = _forward_drops() if drops is None else drops
    if drop is False:
        return ""
    what = "the FORWARD chain's policy is DROP" if drop else "the FORWARD policy could not be read (no iptables or nft)"
    return (f"br_netfilter is loaded (net.bridge.bridge-nf-call-iptables=1) and {what}: packets between "
            f"nodes on bridge {bridge} pass the FORWARD chain; allow them with "
            f"`iptables -I FORWARD -i {bridge} -o {bridge} -j ACCEPT`")


def _forward_drops() -> bool | None:
    if shutil.which("iptables"):
        out = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True)
        if out.returncode == 0:
            return "-P FORWARD DROP" in out.stdout
    if shutil.which("nft"):
        out = subprocess.run(["nft", "list", "ruleset"], capture_output=True, text=True)
        if out.returncode == 0:
            return any("hook forward" in line and "policy drop" in line for line in out.stdout.splitlines())
    return None


def _name_netns(name: str, pid: int) -> None:
    """Name ``pid``'s network namespace in ``ip netns`` (a bind mount of it in /run/netns).

    Not `ip netns attach`: that makes /run/netns a shared mount, which a node in a Debian
    root must not find (see :func:`~slurm_plugin.devcluster.holder.make_private`)."""
    NETNS_DIR.mkdir(parents=True, exist_ok=True)
    target = NETNS_DIR / name
    target.touch()
    result = subprocess.run(["mount", "--bind", f"/proc/{pid}/ns/net", str(target)], capture_output=True, text=True)
    if result.returncode != 0:
        raise DevClusterError(f"naming network namespace {name} failed: {result.stderr.strip()}")


def _unname_netns(name: str) -> None:
    """Take ``name`` out of ``ip netns`` (as `ip netns delete` does, without its remount of /)."""
    target = NETNS_DIR / name
    if target.exists():
        subprocess.run(["umount", "-l", str(target)], capture_output=True)
        target.unlink(missing_ok=True)


def _ip_batch(lines: list[str], inside: int | None = None, force: bool = False) -> None:
    """Run ``ip -batch`` lines, in the network namespace of process ``inside`` when given
    (through nsenter: `ip -n` remounts / and fails in a Debian root)."""
    if not lines:
        return
    enter = ["nsenter", "-t", str(inside), "--net", "--"] if inside else []
    argv = [*enter, "ip", *(["-force"] if force else []), "-batch", "-"]
    result = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True)
    if result.returncode != 0 and not force:
        where = f" in node host {inside}" if inside else ""
        raise DevClusterError(f"ip{where} failed: {result.stderr.strip()[-800:]} (commands: {'; '.join(lines)})")


def _ip_json(what: str) -> list[dict]:
    result = subprocess.run(["ip", "-j", what], capture_output=True, text=True)
    if result.returncode != 0:
        raise DevClusterError(f"`ip -j {what}` failed: {result.stderr.strip()} (is iproute2 installed?)")
    return json.loads(result.stdout or "[]")


def _link_names() -> set[str]:
    try:
        return set(os.listdir("/sys/class/net"))
    except OSError:
        return {link["ifname"] for link in _ip_json("link")}
