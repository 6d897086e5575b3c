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


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def profile_submit(config: Path, requests: int = 300, dialect: str = "gres:", lines: int = 30) -> SubmitProfile:
    from slurm_plugin.helper.daemon import Helper

    helper = Helper(config, spawn_watcher=False)
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
