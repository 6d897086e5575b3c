"""The node's record of packed steps the SPANK plugin did not let start (agent/unisolated.py):
believed only when root wrote it where only root can, listed with the agent's samples until the
helper acknowledges it (issue 33, attack 2: the helper requeues and lifts on this record only)."""
from __future__ import annotations

import json
import os

import pytest

from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.ops import LINK_OPS, dispatch
from slurm_plugin.agent.trust import PRIVILEGED_OPS, Peer, may_call
from slurm_plugin.agent.unisolated import KEEP_S, MAX_LISTED, UnisolatedSpool, parse_record

NOW = 1_700_000_000.0
ROOT = Peer(0, 0, 0)


def _write(spool, job=7, step=4294967291, pid=99, *, mode=0o600, **over):
    doc = {"job_id": job, "step_id": step, "uid": 1000, "node": "node1", "at": NOW - 1, "shards": 2,
           "reason": "cannot connect", **over}
    path = spool / f"{job}.{step}.{pid}.json"
    path.write_text(json.dumps(doc))
    os.chmod(path, mode)
    return path


@pytest.fixture
def agent(tmp_path):
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB"])
    return NodeAgent("node1", tmp_path, backend, clock=lambda: NOW)


def test_a_record_travels_with_the_samples_until_the_helper_acknowledges_it(agent):
    spool = agent.paths.unisolated
    assert spool.is_dir() and (spool.stat().st_mode & 0o777) == 0o700
    path = _write(spool)
    (listed,) = dispatch(agent, "samples", {"latest": True}, ROOT)["unisolated"]
    assert listed["job_id"] == 7 and listed["key"] == path.name and listed["node"] == "node1"
    assert dispatch(agent, "samples", {}, ROOT)["unisolated"] == [listed]  # kept while not acknowledged
    assert dispatch(agent, "ack_unisolated", {"keys": [path.name]}, ROOT)["forgotten"] == 1
    assert not path.exists() and dispatch(agent, "samples", {}, ROOT)["unisolated"] == []
    assert dispatch(agent, "ack_unisolated", {"keys": [path.name]}, ROOT)["forgotten"] == 0  # idempotent
    with pytest.raises(ValueError):
        dispatch(agent, "ack_unisolated", {"keys": ["../state.json"]}, ROOT)


def test_only_the_helper_and_root_may_acknowledge():
    assert "ack_unisolated" in LINK_OPS and "ack_unisolated" in PRIVILEGED_OPS
    assert not may_call("ack_unisolated", Peer(1, 1000, 1000), {0})


def test_a_record_root_did_not_write_where_only_root_can_is_not_believed(tmp_path):
    spool = tmp_path / "spool"
    s = UnisolatedSpool(spool, "node1", lambda: NOW, owner_uid=os.geteuid())
    s.ensure()
    _write(spool, 1, mode=0o666)  # writable by others
    _write(spool, 2, node="node2")  # another node's
    _write(spool, 3, at=NOW - KEEP_S - 1)  # too old: dropped
    _write(spool, 4, shards=0)  # a step with no shards is never stopped
    (spool / "5.4294967291.1.json").symlink_to(_write(tmp_path, 5))  # a link
    bad_name = spool / "6.4294967291.1.json"
    bad_name.write_text(json.dumps({"job_id": 60, "step_id": 4294967291, "node": "node1", "at": NOW, "shards": 1}))
    os.chmod(bad_name, 0o600)
    good = _write(spool, 8)
    assert [r["key"] for r in s.pending()] == [good.name]
    assert not (spool / "3.4294967291.99.json").exists()
    other = UnisolatedSpool(spool, "node1", lambda: NOW, owner_uid=os.geteuid() + 1)  # files not of its uid
    assert other.pending() == []


def test_a_spool_others_may_write_is_not_read(tmp_path):
    spool = tmp_path / "spool"
    s = UnisolatedSpool(spool, "node1", lambda: NOW)
    s.ensure()
    _write(spool)
    os.chmod(spool, 0o777)
    assert s.pending() == []
    os.chmod(spool, 0o700)
    assert len(s.pending()) == 1


def test_the_listing_is_bounded(tmp_path):
    spool = tmp_path / "spool"
    s = UnisolatedSpool(spool, "node1", lambda: NOW)
    s.ensure()
    for job in range(MAX_LISTED + 5):
        _write(spool, job + 1, at=NOW - 1000 + job)
    listed = s.pending()
    assert len(listed) == MAX_LISTED and listed[0]["job_id"] == 1  # the oldest first


@pytest.mark.parametrize("name,doc", [
    ("7.1.1.json", {"job_id": 8, "step_id": 1, "node": "node1", "at": NOW, "shards": 1}),
    ("7.1.1.json", {"job_id": 7, "step_id": 1, "node": "node1", "at": "soon", "shards": 1}),
    ("7.1.1.json", [1]),
    ("x.json", {}),
])
def test_parse_record_refuses(name, doc):
    with pytest.raises(ValueError):
        parse_record(name, json.dumps(doc), "node1")
