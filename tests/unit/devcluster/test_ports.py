"""A test run's block of ports: candidates apart, subnets apart, a claim that excludes another."""
from __future__ import annotations

import socket

import pytest

from slurm_plugin.devcluster import ports


def test_candidates_blocks_and_subnets_do_not_overlap():
    bases = ports.candidate_bases(start=0)
    assert bases == sorted(bases) and all(b2 - b1 >= ports.BLOCK for b1, b2 in zip(bases, bases[1:]))
    assert bases[-1] + ports.BLOCK <= 32768  # below the ephemeral range
    nets = [n for b in bases for n in ports.block_subnets(b)]
    assert len(nets) == len(set(nets)) == 2 * len(bases)


def test_candidates_rotate_with_start():
    a, b = ports.candidate_bases(start=0), ports.candidate_bases(start=3)
    assert sorted(a) == sorted(b) and b[0] == a[3]


def test_subnets_in_use_reads_ip_output():
    out = ("1: lo    inet 127.0.0.1/8 scope host lo\n"
           "7: gpk18000    inet 169.254.41.1/24 brd 169.254.41.255 scope global gpk18000\n"
           "9: eth0    inet 10.1.2.3/16 scope global eth0\n")
    nets = {str(n) for n in ports.subnets_in_use(out)}
    assert nets == {"127.0.0.0/24", "169.254.41.0/24", "10.1.2.0/24"}


#: blocks of this test's own, below every cluster's (the dev clusters' start at 16817, test runs'
#: at 18000): a test run going on beside this one never holds them
OWN = [10000, 11000, 12000]


def test_a_claimed_block_is_not_claimed_again_and_is_released():
    bases = OWN
    first = ports.claim_block(bases)
    try:
        second = ports.claim_block(bases)
        try:
            assert second.base != first.base
        finally:
            second.release()
    finally:
        first.release()
    again = ports.claim_block([first.base])
    assert again.base == first.base
    again.release()


def test_a_block_with_a_busy_port_is_skipped():
    bases = OWN[:2]
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", bases[0] + 101))
        busy.listen(1)
        claim = ports.claim_block(bases)
        try:
            assert claim.base == bases[1]
        finally:
            claim.release()
        with pytest.raises(ports.NoFreeBlock, match=f"{bases[0]} \\(port {bases[0] + 101} in use\\)"):
            ports.claim_block(bases[:1])
