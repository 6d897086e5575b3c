"""A soak of the helper: many jobs through its socket and its watcher, over the stateful fake
Slurm, with the store's size and the process's memory measured as it goes.

Each job is submitted through the helper's socket (the shim's request), runs on a node of the
fake Slurm with memory samples from a scripted agent, completes, and is purged from Slurm's
listing a few rounds later, as slurmctld does (MinJobAge); the watcher's monitor runs one round
per job. The submit side and the watcher share this process (in production they are two), so
the resident memory measured covers both. Workloads repeat (`--workloads` of them), users
and names too, as at a real site; `[retention]` is as the written gpupack.toml says.

    python3 -m slurm_plugin.bench.soak --jobs 20000 --every 2000
"""
from __future__ import annotations

import argparse
import gc
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from store.jsonfile import write_json_atomic
from packer.samples import JobSample
from slurm_plugin.agent.paths import final_path
from slurm_plugin.helper.daemon import Helper
from slurm_plugin.helper.monitor import Monitor
from slurm_plugin.helper.server import ask
from slurm_plugin.helper.view_file import publish, view_path
from slurm_plugin.history_recorder import HistoryRecorder
from slurm_plugin.slurm.fake import FAKE_EPOCH, FakeNode, FakeSlurm
from slurm_plugin.slurm.runner import SlurmRunner

GIB = 1024**3
NODES = 8
RUN_ROUNDS = 4  # rounds a job runs
PURGE_ROUNDS = 3  # rounds a finished job stays listed


@dataclass
class Checkpoint:
    jobs: int
    store_bytes: int  # the database file and its WAL
    rss_bytes: int
    events: int
    runs: int
    watcher_job_maps: int  # entries in the watcher's per-job maps
    seconds: float


def rss_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Samples:
    def __init__(self):
        self.now: dict[int, JobSample] = {}

    def __call__(self, nodes):
        return list(self.now.values())


def write_config(folder: Path, events_max_rows: int, runs_per_fingerprint: int = 50) -> Path:
    path = folder / "gpupack.toml"
    path.write_text(
        '[packer]\nmode = "enforce"\npack_unknown = true\n'
        f'[paths]\ndatabase = "{folder}/gpupack.db"\nsocket = "{folder}/helper.sock"\n'
        f'kill_switch = "{folder}/gpupack.disable"\n'
        "[metrics]\nsubmit_port = 0\nwatch_port = 0\n"
        f"[retention]\nevents_max_rows = {events_max_rows}\nruns_per_fingerprint = {runs_per_fingerprint}\n"
        "prune_every_s = 60\nforget_jobs_after_s = 60\n")
    return path


def soak(jobs: int, every: int, workloads: int, folder: Path, events_max_rows: int,
         runs_per_fingerprint: int = 50) -> list[Checkpoint]:
    config = write_config(folder, events_max_rows, runs_per_fingerprint)
    fake = FakeSlurm()
    fake.nodes = {f"node{i}": FakeNode(f"node{i}") for i in range(1, NODES + 1)}
    helper = Helper(config, spawn_watcher=False)
    helper.server.serve_in_thread()
    samples = Samples()
    clock = [float(FAKE_EPOCH)]
    watcher_owner = _WatcherOwner(helper)
    monitor = Monitor(watcher_owner, runner=SlurmRunner(executor=fake), samples=samples, clock=lambda: clock[0],
                      on_jobs=lambda listing, at: publish(view_path(helper.paths.socket),
                                                          _snapshot(fake, listing, time.time())))
    running: dict[int, int] = {}  # job -> rounds left
    finished: dict[int, int] = {}  # job -> rounds until purged
    out: list[Checkpoint] = []
    started = time.monotonic()
    try:
        for n in range(1, jobs + 1):
            clock[0] += 30.0
            w = n % workloads
            answer = ask(helper.paths.socket, {"user_name": f"user{w % 50}", "name": f"train{w}",
                                               "script": f"#!/bin/sh\npython train{w}.py\n",
                                               "tres_per_node": "gres:gpu:1", "uid": "0"})
            node, gpu = f"node{n % NODES + 1}", n % 2
            gres = answer.get("rewrite") or "gres:gpu:1"
            fake.submit(job_id=n, state="RUNNING", nodes=node, gres=gres,
                        gres_detail=[f"{'shard:h100:2' if 'shard' in gres else 'gpu:h100:1'}(IDX:{gpu})"],
                        start_time=int(clock[0]), admin_comment=answer.get("admin_comment", ""),
                        name=f"train{w}", user=f"user{w % 50}")
            running[n] = RUN_ROUNDS
            _round(fake, samples, monitor, running, finished, clock[0], w)
            if n % every == 0:
                gc.collect()
                store = watcher_owner.store
                out.append(Checkpoint(
                    jobs=n, store_bytes=sum(p.stat().st_size for p in folder.glob("gpupack.db*")),
                    rss_bytes=rss_bytes(), **store.counts("events", "runs"),
                    watcher_job_maps=sum(len(c) for c in monitor.job_maps())
                    + len(monitor.retention_watch.memory.last_listed) + len(monitor.tracks),
                    seconds=time.monotonic() - started))
                print(_row(out[-1]), flush=True)
    finally:
        helper.server.shutdown()
        helper.server.server_close()
    return out


class _WatcherOwner:
    """What the monitor reads of its process: the config, the paths, a store of its own."""

    def __init__(self, helper: Helper):
        from store.db import Store

        self.config, self.paths = helper.config, helper.paths
        self.store = Store(helper.paths.database)


def _snapshot(fake: FakeSlurm, listing, at):
    from slurm_plugin.helper.slurm_poll import snapshot_from

    return snapshot_from(SlurmRunner(executor=fake).nodes(), listing, at)


def _round(fake, samples, monitor, running, finished, now, w) -> None:
    for job_id in list(running):
        job = fake.jobs[job_id]
        running[job_id] -= 1
        started = float(job.start_time)
        samples.now[job_id] = JobSample(job_id=job_id, node=job.nodes, gpu_index=0, at=now, mem_bytes=(2 + w % 5) * GIB,
                                        peak_mem_bytes=(2 + w % 5) * GIB, throughput=None, isolation="shard:2",
                                        started_at=started, util_pct=30.0)
        if running[job_id] <= 0:
            del running[job_id]
            job.state, job.end_time = "COMPLETED", int(now)
            finished[job_id] = PURGE_ROUNDS
            # the node agent's final summary, written when the batch step ends
            write_json_atomic(final_path(monitor.agent_state_dir, job.nodes, job_id), {
                "job_id": job_id, "node": job.nodes, "gpu_index": 0, "isolation": "shard:2", "shards": 2,
                "peak_mem_bytes": (2 + w % 5) * GIB, "mean_util_pct": 30.0, "mean_throughput": None,
                "samples": RUN_ROUNDS, "started_at": started, "ended_at": now, "end_reason": "completed"})
    monitor.tick()
    # then what the watcher's finals thread does: it writes the runs the round saw end (the one writer)
    monitor.actions.finished_runs.write(HistoryRecorder(monitor.actions.store, monitor.actions.runner, "sweep"))
    fake.calls.clear()  # the fake's own record of the commands it ran (a test aid, not the helper's)
    fake.envs.clear()
    for job_id in list(finished):
        finished[job_id] -= 1
        if finished[job_id] <= 0:
            del finished[job_id]
            job = fake.jobs.pop(job_id)
            final_path(monitor.agent_state_dir, job.nodes, job_id).unlink(missing_ok=True)
            samples.now.pop(job_id, None)


def _row(c: Checkpoint) -> str:
    return (f"{c.jobs:>7} jobs  store {c.store_bytes / 2**20:7.2f} MiB  rss {c.rss_bytes / 2**20:7.1f} MiB  "
            f"events {c.events:>7}  runs {c.runs:>6}  watcher job maps {c.watcher_job_maps:>5}  {c.seconds:7.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--every", type=int, default=2000)
    parser.add_argument("--workloads", type=int, default=200)
    parser.add_argument("--events-max-rows", type=int, default=20000,
                        help="[retention] events_max_rows for the run (the default keeps a million)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="gpupack-soak-") as tmp:
        soak(args.jobs, args.every, args.workloads, Path(tmp), args.events_max_rows)


if __name__ == "__main__":
    main()
