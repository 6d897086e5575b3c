"""Where the submit decision's time goes: cProfile of the helper's submit handler.

A submit side is built in this process on a running cluster's gpupack.toml (its store, the
cluster view its watcher publishes; no socket, no watcher of its own) and asked to decide
requests like the shim's, one after another, under cProfile. The figures are the handler's
own (`SubmitService.respond` and the bookkeeping after it), without the socket or the shim.
"""
from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from slurm_plugin.bench.scale_figures import percentile as _percentile

SCRIPT = b"#!/bin/sh\n# gpupack submit profile\ntrue\n"


@dataclass
class SubmitProfile:
    requests: int
    p50_ms: float  # per decision, under the profiler (its overhead included)
    p99_ms: float
    unprofiled_p50_ms: float  # the same requests again, without the profiler
    unprofiled_p99_ms: float
    verdicts: dict[str, int]
    top: str  # pstats' lines, by cumulative time


def shim_fields(index: int, user: str = "root", dialect: str = "gres:") -> dict[str, bytes]:
    """A request as the shim encodes it for `sbatch --gres=gpu:1 -J bench-N` (a few job names,
    so history lookups see more than one fingerprint)."""
    return {
        "uid": b"0", "user_name": user.encode(), "name": f"gpupack-profile-{index % 7}".encode(),
        "script": SCRIPT, "tres_per_node": f"{dialect}gpu:1".encode(), "min_nodes": b"1", "max_nodes": b"1",
        "num_tasks": b"1", "partition": b"gpu", "requeue": b"1", "batch": b"1",
    }


def profile_submit(config: Path, requests: int = 300, dialect: str = "gres:", lines: int = 30) -> SubmitProfile:
    from slurm_plugin.helper.daemon import Helper

    helper = Helper(config, spawn_watcher=False, listen=False)  # the cluster's helper keeps its socket
    service = helper.service
    verdicts: dict[str, int] = {}

    def one(i: int) -> float:
        t0 = time.perf_counter()
        answer, after = service.respond(shim_fields(i, dialect=dialect))
        after()
        verdicts[answer.reason] = verdicts.get(answer.reason, 0) + 1
        return (time.perf_counter() - t0) * 1000

    for i in range(10):  # warm: the view read, the rules built, SQLite's pages cached
        one(i)
    profiler = cProfile.Profile()
    profiled = []
    profiler.enable()
    for i in range(requests):
        profiled.append(one(i))
    profiler.disable()
    plain = [one(i) for i in range(requests)]
    helper.store.close()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(lines)
    return SubmitProfile(
        requests=requests,
        p50_ms=round(statistics.median(profiled), 3), p99_ms=round(_percentile(profiled, 0.99), 3),
        unprofiled_p50_ms=round(statistics.median(plain), 3), unprofiled_p99_ms=round(_percentile(plain, 0.99), 3),
        verdicts=verdicts, top=out.getvalue(),
    )


@dataclass
class ViewReads:
    nodes: int
    running: int
    view_bytes: int
    loader: bool
    requests: int
    publishes: int
    p50_ms: float
    p99_ms: float
    max_ms: float


def site_snapshot(nodes: int, gpus: int, running: int, taken_at: float):
    """A site-sized cluster view: ``nodes`` busy nodes of ``gpus`` GPUs, ``running`` jobs, one
    shared GPU in three with three packed jobs."""
    from packer.placement import Running
    from slurm_plugin.helper.cluster_view import NodeGpus, Snapshot
    from slurm_plugin.helper.queue_state import QueueState, SharedGpu, SharedJob

    names = [f"n{i}" for i in range(nodes)]
    node_gpus = tuple(NodeGpus(n, frozenset({"MIXED"}), gpus, frozenset(range(gpus))) for n in names)
    jobs = tuple(Running(i, f"{i % 500:016x}", (names[i % nodes],), i % 3 == 0) for i in range(running))
    shared = tuple(SharedGpu(names[i], 0, tuple(SharedJob(i * 10 + k, f"{k:016x}", 2, 3600.0) for k in range(3)))
                   for i in range(0, nodes, 3))
    queue = QueueState(running, nodes * gpus, tuple(float(i) for i in range(nodes * gpus)), shared)
    return Snapshot(node_gpus, 0, taken_at, jobs, queue)


def time_view_reads(folder: Path, nodes: int = 2000, gpus: int = 8, running: int = 16000, seconds: float = 20.0,
                    loader: bool = True, every_s: float = 1.0) -> ViewReads:
    """What a request spends on the cluster view (`view()` and `snapshot()`, as a decision
    asks them) while a site-sized view is published every ``every_s`` (as the watcher does),
    with the loader reading it or the requests themselves."""
    import threading

    import json
    import os

    from slurm_plugin.helper.view_file import PublishedView, snapshot_to_doc

    path = folder / "cluster-view.json"
    # the watcher writes the view from a process of its own: here the text is made once and
    # only its time changed (this process's interpreter lock is the requests')
    text = json.dumps(snapshot_to_doc(site_snapshot(nodes, gpus, running, 1.0))).replace('"taken_at": 1.0', '"taken_at": %r')

    def publish_now() -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text % time.time())
        os.replace(tmp, path)

    publish_now()
    view = PublishedView(path, max_age_s=60)
    if loader:
        view.start_loader()
    stop = threading.Event()
    published = [0]

    def publisher() -> None:
        while not stop.wait(every_s):
            publish_now()
            published[0] += 1

    thread = threading.Thread(target=publisher, daemon=True)
    thread.start()
    took = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        view.view()
        view.snapshot()
        took.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.002)  # a request every few ms, as a burst of sbatch brings them
    stop.set()
    thread.join()
    view.stop_loader()
    return ViewReads(nodes, running, path.stat().st_size, loader, len(took), published[0],
                     round(statistics.median(took), 4), round(_percentile(took, 0.99), 3), round(max(took), 3))
