"""No action strands a job: a requeue that would exclude the only nodes a job may run on, or
ask for more than its QOS allows, is not done (an event says why). One test per constraint,
on the stateful FakeSlurm (which, as slurmctld, leaves a job pinned to a node it excludes
PENDING with BadConstraints for good), and the contention watch's pinned newcomer."""
from __future__ import annotations

from packer.config import PackerConfig
from packer.feasibility import ClusterFacts, JobFacts, NodeFacts, features_match, parse_licenses, stranded_by
from store.db import Store
from slurm_plugin.helper.watches.actions import Actions
from slurm_plugin.helper.watches.state import WatchState
from slurm_plugin.slurm.fake import FAKE_EPOCH, FakeNode, FakeSlurm
from slurm_plugin.slurm.runner import SlurmRunner

from tests.unit.helper import rounds_support
from tests.unit.helper.rounds_support import running


def _actions(tmp_path, fake):
    runner = SlurmRunner(executor=fake)
    return Actions(runner, Store(tmp_path / "db"), WatchState(), lambda: PackerConfig(mode="enforce")), runner


def _requeue(tmp_path, fake, job_id, **change):
    actions, runner = _actions(tmp_path, fake)
    done = actions.requeue_at_head(runner.job(job_id), "requeue-contention", "test", **change)
    skipped = [e for e in actions.store.events() if e.kind == "requeue-contention-skipped"]
    return done, skipped


def _running(fake, job_id=7, **fields):
    fake.submit(job_id=job_id, state="RUNNING", nodes="node1", gres="gres:shard:2",
                gres_detail=["shard:h100:2(IDX:0)"], start_time=FAKE_EPOCH, **fields)


def test_a_job_pinned_to_the_node_it_would_be_kept_off_is_not_requeued(tmp_path):
    fake = FakeSlurm()
    _running(fake, required_nodes="node1")
    done, (event,) = _requeue(tmp_path, fake, 7, exclude=frozenset({"node1"}))
    assert not done and fake.jobs[7].state == "RUNNING"
    assert "pinned to node1 (-w)" in event.detail
    assert not [c for c in fake.calls if c[1:2] == ["requeuehold"]]


def test_the_same_requeue_of_an_unpinned_job_is_done(tmp_path):
    fake = FakeSlurm()
    _running(fake)
    done, skipped = _requeue(tmp_path, fake, 7, exclude=frozenset({"node1"}))
    assert done and not skipped and fake.jobs[7].state == "PENDING" and fake.jobs[7].state_reason != "BadConstraints"


def test_partition_whose_only_other_node_is_elsewhere(tmp_path):
    fake = FakeSlurm()
    fake.nodes["node2"] = FakeNode("node2", partitions=("cpu",))
    _running(fake, partition="gpu")
    done, (event,) = _requeue(tmp_path, fake, 7, exclude=frozenset({"node1"}))
    assert not done and "no node in partition gpu" in event.detail


def test_node_features(tmp_path):
    fake = FakeSlurm()
    fake.nodes["node1"] = FakeNode("node1", features="a100,ib")
    fake.nodes["node2"] = FakeNode("node2", features="a100")
    _running(fake, features="a100&ib")
    done, (event,) = _requeue(tmp_path, fake, 7, exclude=frozenset({"node1"}))
    assert not done and "no node with features a100&ib" in event.detail
    fake.nodes["node2"].features = "ib,a100"
    assert _requeue(tmp_path / "again", fake, 7, exclude=frozenset({"node1"}))[0]


def test_reservation(tmp_path):
    fake = FakeSlurm()
    fake.reservations["maint"] = "node1"
    _running(fake, resv_name="maint")
    done, (event,) = _requeue(tmp_path, fake, 7, exclude=frozenset({"node1"}))
    assert not done and "no node in reservation maint" in event.detail


def test_licences(tmp_path):
    fake = FakeSlurm()
    fake.licenses = {"matlab": 1}
    _running(fake, licenses="matlab:2")
    done, (event,) = _requeue(tmp_path, fake, 7, exclude=frozenset({"node2"}))
    assert not done and "needs 2 of licence matlab, the cluster has 1" in event.detail


def test_qos_limit_on_a_restart_size(tmp_path):
    fake = FakeSlurm(accounting=True)
    fake.qos_limits["small"] = "gres/shard=4"
    _running(fake, qos="small")
    done, (event,) = _requeue(tmp_path, fake, 7, gres="shard:6")
    assert not done and "QOS small allows at most 4 gres/shard" in event.detail
    assert _requeue(tmp_path / "again", fake, 7, gres="shard:4")[0]


def test_a_cluster_without_accounting_has_no_qos_limit_to_check(tmp_path):
    fake = FakeSlurm(accounting=False)
    _running(fake, qos="small")
    assert _requeue(tmp_path, fake, 7, gres="shard:6")[0]


def test_contention_never_strands_a_pinned_newcomer(tmp_path):
    """Seen live: the newcomer pinned with -w to its node was requeued with that node excluded
    and waited for good (BadConstraints). Now it keeps running and an event says why."""
    fake, helper, samples, monitor = rounds_support.make(tmp_path, fixed_clock=True)
    running(fake, 1, fp="aaaa", start=FAKE_EPOCH)
    for t in range(10):
        samples.put(1, FAKE_EPOCH + t, throughput=20.0, started_at=FAKE_EPOCH)
        monitor.tick()
    running(fake, 2, fp="bbbb", start=FAKE_EPOCH + 10)
    fake.jobs[2].required_nodes = "node1"
    for t in range(10, 16):
        samples.put(1, FAKE_EPOCH + t, throughput=15.0, started_at=FAKE_EPOCH)
        samples.put(2, FAKE_EPOCH + t, throughput=30.0, started_at=FAKE_EPOCH + 10)
        monitor.tick()
    assert fake.jobs[2].state == "RUNNING" and fake.jobs[2].state_reason != "BadConstraints"
    (event,) = [e for e in helper.store.events() if e.kind == "requeue-contention-skipped"]
    assert event.job_id == 2 and "pinned to node1" in event.detail
    assert helper.store.pairs.must_avoid("aaaa", "bbbb")  # the pair is still learnt


def test_pure_rules():
    assert features_match("[rack1|rack2]&gpu", frozenset({"rack2", "gpu"}))
    assert not features_match("a&b", frozenset({"a"}))
    assert parse_licenses("matlab:2,foo,bar*3") == {"matlab": 2, "foo": 1, "bar": 3}
    job = JobFacts(7, partitions=("gpu",))
    cluster = ClusterFacts(nodes=(NodeFacts("n1", frozenset({"gpu"})), NodeFacts("n2", frozenset({"gpu"}))))
    assert stranded_by(job, cluster, exclude=frozenset({"n1"})) is None
    assert "no node not excluded" in stranded_by(job, cluster, exclude=frozenset({"n1", "n2"}))
