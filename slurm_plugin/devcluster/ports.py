"""A free block of ports for a cluster of this machine's, claimed for as long as it runs.

A dev or test cluster takes one base port and derives every other from it (slurmctld at the
base; web view, slurmdbd, MariaDB, slurmds, agents, metrics and srun's range above it, up to
``BLOCK`` ports in all, a second test cluster of its own included), and its multi-host
network's subnet from the base too (:class:`~slurm_plugin.devcluster.topology.Network`).
Two test runs on one machine, or the legs of several Slurm releases at once (each in a
chroot of its own, all in the machine's one network namespace), must not pick the same block.

:func:`claim_block` picks a base whose whole block is free here and whose subnets no interface
holds, then *claims* it by binding a TCP socket on ``base + CLAIM_OFFSET`` (an offset no
daemon uses). The kernel makes that bind atomic across processes and chroots, and releases
it when the claiming process ends, however it ends: nothing to clean up, no stale lock.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import socket
import subprocess
from dataclasses import dataclass

from slurm_plugin.devcluster.topology import Network

log = logging.getLogger(__name__)

#: Ports a cluster may use above its base: the session's cluster (up to base + 499: srun's
#: range) and a second one of its own at base + 250 (the multi-host test's), so 750; rounded up.
BLOCK = 1000
#: The claim socket's offset in the block: no daemon of either cluster listens there.
CLAIM_OFFSET = 60
#: Offsets of the second cluster a test run may start (its subnet must be free too).
SECOND_CLUSTER_OFFSET = 250
#: Bases tried: below Linux's default ephemeral range (32768-60999), so an outgoing connection
#: never holds one of the block's ports.
FIRST_BASE = 18000
LAST_BASE = 31000
#: The dev clusters' fixed ports (the host's and each Debian root's `devcluster up`) and the
#: ports above them that they use: no test block overlaps them.
RESERVED = tuple((p, p + 500) for p in (16817, 26817, 36817, 46817))


class NoFreeBlock(RuntimeError):
    """Every candidate block is taken; the message names what was tried."""


@dataclass
class PortClaim:
    """A claimed block: ``base`` is the cluster's slurmctld port. Held until :meth:`release`
    (or the process's end)."""

    base: int
    sock: socket.socket

    def release(self) -> None:
        self.sock.close()


def candidate_bases(first: int = FIRST_BASE, last: int = LAST_BASE, start: int | None = None) -> list[int]:
    """Every base from ``first`` to ``last`` in steps of ``BLOCK``, rotated to begin at the
    ``start``-th (default: from this process's id), so runs that start together try
    different blocks first."""
    bases = [b for b in range(first, last + 1, BLOCK)
             if not any(b < hi and lo < b + BLOCK for lo, hi in RESERVED)]
    k = (os.getpid() if start is None else start) % len(bases)
    return bases[k:] + bases[:k]


def subnets_in_use(ip_output: str) -> set[ipaddress.IPv4Network]:
    """The /24 networks that hold the IPv4 addresses of ``ip -o -4 addr`` output."""
    nets = set()
    for line in ip_output.splitlines():
        parts = line.split()
        if "inet" in parts[:-1]:
            address = parts[parts.index("inet") + 1].split("/")[0]
            try:
                nets.add(ipaddress.IPv4Interface(f"{address}/24").network)
            except ValueError:
                continue
    return nets


def _ip_addresses() -> str:
    try:
        return subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def block_subnets(base: int) -> set[ipaddress.IPv4Network]:
    """The multi-host subnets the block's clusters would use."""
    return {Network(base).subnet, Network(base + SECOND_CLUSTER_OFFSET).subnet}


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _bind_claim(port: int) -> socket.socket | None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        s.listen(1)
    except OSError:
        s.close()
        return None
    return s


def claim_block(bases: list[int] | None = None) -> PortClaim:
    """Claim the first free block of ``bases`` (default :func:`candidate_bases`)."""
    tried = []
    taken_nets = subnets_in_use(_ip_addresses())
    for base in bases if bases is not None else candidate_bases():
        if block_subnets(base) & taken_nets:
            tried.append(f"{base} (subnet in use)")
            continue
        sock = _bind_claim(base + CLAIM_OFFSET)
        if sock is None:
            tried.append(f"{base} (claimed by another run)")
            continue
        busy = [p for p in range(base, base + BLOCK) if p != base + CLAIM_OFFSET and not _port_free(p)]
        if busy:
            sock.close()
            tried.append(f"{base} (port {busy[0]} in use)")
            continue
        log.info("claimed ports %d-%d (claim on %d)", base, base + BLOCK - 1, base + CLAIM_OFFSET)
        return PortClaim(base, sock)
    raise NoFreeBlock("no free block of ports for a test cluster; tried " + ", ".join(tried))
