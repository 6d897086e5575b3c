"""The submit path's load-aware admission: the queue from the watcher's
job listing, published in the cluster view, and the packer's pack kept only where it pays."""
from __future__ import annotations

import json
from datetime import datetime, timezone

from packer.config import GIB, PackerConfig
from packer.decision import ClusterView
from packer.fingerprint import fingerprint
from store.db import RunRecord, Store
from packer.placement import Running
from slurm_plugin.helper.cluster_view import NodeGpus, Snapshot
from slurm_plugin.helper.monitor_settings import MonitorSettings
from slurm_plugin.helper.queue_state import QueueState, SharedGpu, SharedJob, queue_state
from slurm_plugin.helper.slurm_poll import snapshot_from
from slurm_plugin.helper.submit_service import SubmitService
from fixed_view import FixedView
from slurm_plugin.helper.view_file import snapshot_from_doc, snapshot_to_doc
from packer.gres import GresItem
from slurm_plugin.slurm.model import Job, Node

NOW = 1_700_000_000.0
BODY = b"#!/bin/sh\ntrain\n"
NEW_FP = fingerprint("alice", "t", BODY)


def at(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=timezone.utc)


def test_the_queue_is_read_from_the_job_listing():
    jobs = [
        Job(1, state="RUNNING", nodes="n1", gres=(GresItem("shard", count=2),),
            gres_detail=(GresItem("shard", "h100", 2, indexes=(0,)),), start_time=at(NOW - 600),
            time_limit_s=3600, admin_comment="gpupack: packed shard:2 fp=aaaa"),
        Job(2, state="RUNNING", nodes="n1", gres=(GresItem("gpu"),),
            gres_detail=(GresItem("gpu", "h100", 1, indexes=(1,)),), start_time=at(NOW - 100), time_limit_s=1000),
        Job(3, state="RUNNING", nodes="n2", gres=(GresItem("gpu"),),
            gres_detail=(GresItem("gpu", "h100", 1, indexes=(0,)),), start_time=at(NOW)),  # no limit
        Job(4, state="PENDING", gres=(GresItem("gpu"),)),
        Job(5, state="PENDING", gres=(GresItem("shard", count=1),)),
        Job(6, state="PENDING", gres=(GresItem("gpu"),), held=True),  # held: not waiting
        Job(7, state="PENDING"),  # no GPU
    ]
    q = queue_state(jobs, gpus=4, now=NOW)
    assert (q.waiting, q.gpus) == (2, 4)
    assert q.releases_s == (900.0, 3000.0)  # n1:1 by job 2's limit, n1:0 by job 1's; n2:0 unknown
    assert q.shared == (SharedGpu("n1", 0, (SharedJob(1, "aaaa", 2, 3000.0),)),)
    # published with the rest of the view, and read back the same
    snap = snapshot_from([Node("n1", ("MIXED",), gres=(GresItem("gpu", count=2),))], jobs, NOW)
    assert snap.queue == QueueState(2, 2, q.releases_s, q.shared)
    assert snapshot_from_doc(json.loads(json.dumps(snapshot_to_doc(snap)))) == snap


def store_with(new_peak=7.6, resident_util=60.0, new_util=60.0) -> Store:
    store = Store()
    store.record_run(RunRecord(1, NEW_FP, int(new_peak * GIB), new_util, started_at=NOW - 7200, ended_at=NOW - 3600))
    store.record_run(RunRecord(2, "aaaa", 10 * GIB, resident_util, started_at=NOW - 9000, ended_at=NOW - 100))
    return store


def snapshot(release_s: float, left_s: float | None = 7200.0, queue: bool = True) -> Snapshot:
    q = QueueState(waiting=0, gpus=2, releases_s=(release_s,),
                   shared=(SharedGpu("n1", 0, (SharedJob(11, "aaaa", 2, left_s),)),)) if queue else None
    # job 11 (workload aaaa, packed) runs on n1; n2's GPUs are held whole
    return Snapshot(nodes=(NodeGpus("n1", frozenset({"MIXED"}), 2, frozenset({0, 1})),
                           NodeGpus("n2", frozenset({"ALLOCATED"}), 2, frozenset({0, 1}))),
                    pending_whole_gpu_jobs=0, taken_at=NOW, running=(Running(11, "aaaa", ("n1",), True),), queue=q)


def service(store: Store, snap, monitor: MonitorSettings | None = None) -> SubmitService:
    cfg = PackerConfig(mode="enforce")
    rules = (monitor or MonitorSettings()).rules
    # pair avoidance as the daemon's: the nodes of the partners running (here n1's job)
    return SubmitService(lambda: cfg, store, FixedView(ClusterView(0), snap), rules=rules)


FIELDS = {"user_name": b"alice", "name": b"t", "script": BODY, "tres_per_node": b"gres:gpu:1"}


def answer(store, snap, **kw):
    import slurm_plugin.helper.submit_service as mod

    real = mod.time.time
    mod.time.time = lambda: NOW  # the runs' ages and the view's age are read from the clock
    try:
        return service(store, snap, **kw).answer(FIELDS)
    finally:
        mod.time.time = real


def test_a_pack_that_pays_is_kept_and_one_that_does_not_keeps_its_gpu():
    store = store_with()
    store.pairs.record_pair_speed(NEW_FP, "aaaa", 0.6)
    store.pairs.record_pair_speed("aaaa", NEW_FP, 0.6)
    # the newcomer's runs last an hour: together at 0.6 they lose 2 x 0.4 x 6000 s = 4800 s
    late = answer(store, lambda: snapshot(release_s=20000.0))
    assert (late.verdict, late.rewrite) == ("packed", "gres:shard:1")
    soon = answer(store, lambda: snapshot(release_s=600.0))  # a whole GPU frees in 10 minutes
    assert (soon.verdict, soon.reason, soon.rewrite) == ("exclusive", "pack-does-not-pay", "")
    assert "reason=pack-does-not-pay" in soon.admin_comment
    # the older rule (an admin's choice) packs it: the pair is no reason at submit
    bound = answer(store, lambda: snapshot(release_s=600.0), monitor=MonitorSettings(admission="slowdown-bound"))
    assert bound.verdict == "packed"


def test_a_pair_learned_to_fail_is_kept_apart_and_the_floor_holds():
    store = store_with()
    store.pairs.avoid_pair(NEW_FP, "aaaa", "failed together")
    kept_off = answer(store, lambda: snapshot(release_s=1e9))  # never beside it: kept off its node
    assert (kept_off.verdict, kept_off.exclude) == ("packed", "n1")
    store = store_with()
    store.pairs.record_pair_speed(NEW_FP, "aaaa", 0.3)  # below an equal share of the GPU
    assert answer(store, lambda: snapshot(release_s=1e9)).reason == "below-min-speed"
    idle = Snapshot(nodes=(NodeGpus("n1", frozenset({"MIXED"}), 2, frozenset({0})),), pending_whole_gpu_jobs=0,
                    taken_at=NOW, queue=snapshot(1e9).queue)
    assert answer(store, lambda: idle).verdict == "packed"  # a GPU is idle: it may start there
    low = MonitorSettings(min_speed=0.25)
    assert answer(store, lambda: snapshot(release_s=1e9), monitor=low).verdict == "packed"


def test_it_fails_open():
    store = store_with()
    store.pairs.record_pair_speed(NEW_FP, "aaaa", 0.3)
    assert answer(store, lambda: None).verdict == "packed"  # no fresh view
    assert answer(store, lambda: snapshot(1.0, queue=False)).verdict == "packed"  # an older watcher

    def broken():
        raise RuntimeError("view unreadable")

    assert answer(store, broken).verdict == "packed"


def test_history_older_than_the_configured_age_is_not_looked_at():
    store = Store()
    store.record_run(RunRecord(1, NEW_FP, int(7.6 * GIB), 30.0, ended_at=NOW - 100 * 86400))
    cfg = PackerConfig(mode="enforce")
    assert cfg.history_max_age_days == 90.0
    est, _ = store.history(NEW_FP, since=cfg.history_since(NOW))
    assert est is None
    assert store.history(NEW_FP, since=PackerConfig(history_max_age_days=0).history_since(NOW))[0] is not None
    assert answer(store, lambda: None).reason == "no-history"
    store.record_run(RunRecord(2, NEW_FP, int(7.6 * GIB), 30.0, ended_at=NOW - 10 * 86400))
    assert answer(store, lambda: None).verdict == "packed"


def test_an_unmeasured_pair_is_judged_by_the_pair_model_fitted_on_the_stores_pairs():
    """The newcomer and the job there are both busy (90 %) and never ran together. Processor
    sharing says 0.56 each (above the 0.5 floor); the pairs the store measured between other
    workloads say two busy jobs run at 0.2 beside each other: the model fitted on them keeps
    the newcomer off that GPU. With no pairs measured it is tried (its upper bound)."""
    fresh = store_with(resident_util=90.0, new_util=90.0)
    assert answer(fresh, lambda: snapshot(release_s=1e9)).verdict == "packed"
    store = store_with(resident_util=90.0, new_util=90.0)
    others = [f"w{i}" for i in range(10)]
    for i, fp in enumerate(others):
        store.record_run(RunRecord(100 + i, fp, 10 * GIB, 90.0 if i % 2 == 0 else 10.0,
                                   started_at=NOW - 9000, ended_at=NOW - 100))
    for a in others:
        for b in others:
            if a != b:
                store.pairs.record_pair_speed(a, b, 0.2 if int(a[1:]) % 2 == 0 and int(b[1:]) % 2 == 0 else 0.95)
    refused = answer(store, lambda: snapshot(release_s=1e9))
    assert (refused.verdict, refused.reason) == ("exclusive", "below-min-speed")


def test_the_view_loader_prepares_what_the_stage_reads_so_a_submission_builds_nothing(monkeypatch):
    import slurm_plugin.helper.submit_admission as adm

    store = store_with()
    store.pairs.record_pair_speed(NEW_FP, "aaaa", 0.6)
    store.pairs.record_pair_speed("aaaa", NEW_FP, 0.6)
    snap = snapshot(release_s=600.0)
    monkeypatch.setattr(time_module(), "time", lambda: NOW)
    svc = service(store, lambda: snap)
    svc.prepare_view(snap)  # what the loader runs on each new view, before requests see it

    def built_on_the_request_path(*_a):
        raise AssertionError("the residents were built on the request path")

    monkeypatch.setattr(adm, "_residents", built_on_the_request_path)
    got = svc.answer(FIELDS)
    assert (got.verdict, got.reason) == ("exclusive", "pack-does-not-pay")  # judged on the prepared residents
    # a reloaded [packer] table makes new rules: what was prepared with the old ones is not used
    svc._rules = None
    assert svc.answer(FIELDS).verdict == "packed"  # the stage failed open on the rebuild it then tried


def time_module():
    import time

    return time
