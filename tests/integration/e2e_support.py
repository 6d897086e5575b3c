"""What the end-to-end tests on the real cluster share: job scripts, waiting, the event log,
an emptied cluster.

(Imported by name: pytest puts this folder on sys.path, it has no __init__.py.)
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from store.db import Store

PY = sys.executable
RUN = time.time_ns()  # the cluster's history and pairs outlive a test run: keep runs apart
SLEEP = b"#!/bin/sh\nsleep 300\n"


def simgpu_script(args: str, *, tag: str = "gpupack test run", report: bool = True, after: Path | None = None) -> bytes:
    """A batch script running one simulated GPU workload; `report=False`: it never reports
    its progress (the agent sees only the GPU's counters); `after`: it starts once that file
    exists (the test decides when, e.g. once the helper has told the node where the job's
    output goes)."""
    quiet = "" if report else " --no-report"
    wait = f"while [ ! -e '{after}' ]; do sleep 0.2; done\n" if after is not None else ""
    # the run's tag is a no-op command, not a comment: a comment does not change the workload
    return f"#!/bin/sh\n: '{tag} {RUN}'\n{wait}exec {PY} -m slurm_plugin simgpu run{quiet} {args}\n".encode()


def fill_all_but_one_gpu(cluster, tag: str) -> tuple[dict[str, int], int]:
    """Every GPU busy but node1's first (where the test runs its senior): sleepers on node1's
    second (shard:5, all its shares) and on node2 and node3 (gpu:2), then a job waiting for a whole node,
    held (`scontrol release` it when due). The sleepers of node2 and node3, and the held job."""
    cluster.submit(["-J", f"{tag}-fill", "-w", "node1", "--gres=shard:5"], SLEEP)
    fillers = {n: cluster.submit(["-J", f"{tag}-fill", "-w", n, "--gres=gpu:2"], SLEEP) for n in ("node2", "node3")}
    for job in fillers.values():
        cluster.wait(job, "RUNNING", 30)
    waiting = cluster.submit(["-J", f"{tag}-wait", "--hold", "--gres=gpu:2"], SLEEP)
    return fillers, waiting


def wait_for(predicate, timeout: float, what: str, interval: float = 0.5, explain=None):
    """Poll `predicate` until it returns something true (returned); else fail with `what`,
    the last value and, when given, `explain()` (what the test saw, for the failure)."""
    deadline = time.time() + timeout
    value = None
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    seen = f"; {explain()}" if explain is not None else ""
    raise AssertionError(f"{what}: not true after {timeout}s (last: {value!r}){seen}")


def within_rounds(cluster, predicate, what: str, rounds: int = 2, after_s: float = 0.0, timeout: float = 240.0,
                  interval: float = 0.5, explain=None):
    """Poll `predicate` until it returns something true (returned); fail once `after_s` seconds
    have passed (the time the test allowed before: what the jobs and the cluster need first)
    and the helper's watcher has then ended `rounds` whole rounds without it. A round's cycle
    stretches with the round (its duty cap), up to 20 s seen on a loaded machine, so no fixed
    time fits what a round does. (`timeout`: a watcher that stopped; `explain`: as for wait_for.)"""
    ended = watcher_rounds(cluster)
    # the round under way may have begun before the count: the one after it began after
    began, start, done = time.time(), None, 0.0
    while True:
        if time.time() - began >= after_s:
            count = ended()  # read before the predicate: a round ended counts only once seen
            if start is None:
                start = count
            elif count is not None:
                done = count - start
        value = predicate()
        if value:
            return value
        if (start is not None and done >= rounds) or time.time() - began > timeout:
            raise AssertionError(f"{what}: not true after {time.time() - began:.0f}s, the last {done:.0f} "
                                 f"rounds of the watcher included (last: {value!r})"
                                 + (f"; {explain()}" if explain is not None else ""))
        time.sleep(interval)


def watcher_cycle_s(cluster) -> float:
    """The watcher's last round plus its pause (`gpupack_watcher_cycle_seconds`): how often its
    rounds come now; 1.0 while it does not serve its metrics."""
    from test_metrics_live import sample, scrape, status_rows

    url = next(r["metrics_url"] for r in status_rows(cluster) if r["role"] == "watcher")
    try:
        return max(1.0, sample(scrape(url), "gpupack_watcher_cycle_seconds"))
    except (OSError, AssertionError, KeyError):
        return 1.0


def watcher_rounds(cluster):
    """A function that reads how many rounds the helper's watcher has ended (None while it
    does not serve its metrics: (re)starting)."""
    from test_metrics_live import sample, scrape, status_rows

    url = next(r["metrics_url"] for r in status_rows(cluster) if r["role"] == "watcher")

    def ended() -> float | None:
        try:
            return sample(scrape(url), "gpupack_monitor_rounds_total")
        except OSError:
            return None

    return ended


def through_rounds(cluster, check, rounds: int = 2, min_s: float = 0.0, timeout: float = 240.0,
                   interval: float = 0.5) -> int:
    """Run ``check`` (it asserts) until the watcher has ended ``rounds`` whole rounds that began
    after this call, and at least ``min_s`` seconds passed (what a watch needs to see before it
    acts, e.g. a throughput window): "nothing happened" holds only once the rounds that could
    have done it ran. Returns how many times ``check`` ran."""
    ended = watcher_rounds(cluster)
    began, start, checks = time.time(), None, 0
    while True:
        count = ended()
        if start is None:
            start = count
        check()
        checks += 1
        # the round under way when counting began may have begun before: one more must end
        if (start is not None and count is not None and count - start >= rounds + 1
                and time.time() - began >= min_s):
            return checks
        if time.time() - began > timeout:
            raise AssertionError(f"the watcher did not end {rounds} rounds in {timeout:.0f}s")
        time.sleep(interval)


def job_log(cluster, job_id: int, limit: int = 60) -> str:
    """The cluster's log lines (helper, watcher, agents, slurmd, slurmctld) that name ``job_id``,
    the newest ``limit``, for a failure's message: CI keeps only what pytest prints."""
    named = re.compile(rf"(?i)\bjob(?:id=| )?{job_id}\b|\[{job_id}\.")
    lines: list[str] = []
    for path in sorted(cluster.spec.log.glob("*.log")):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        lines += [f"{path.stem}: {line[:300]}" for line in text.splitlines() if named.search(line)]
    return "\n".join(lines[-limit:])


def events(cluster, kind: str, job_id: int):
    store = Store(cluster.spec.database)
    try:
        return [e for e in store.events(limit=500, job_id=job_id) if e.kind == kind]
    finally:
        store.close()


@pytest.fixture
def idle_cluster(cluster):
    """The session's cluster with no job in it, before the test and after it (conftest.py
    imports it, so any test of this folder may ask for it). It starts once the submit side's
    cluster view no longer holds the jobs an earlier test left."""
    cluster.emptied()
    try:
        yield cluster
    finally:
        cluster.cancel_all()


@contextmanager
def mps_agent(cluster, node: str, isolation: tuple[str, ...] = ("--isolation", "mps")):
    """``node``'s agent restarted in MPS mode for the block (the agent the dev cluster runs,
    with ``--isolation mps``, or the given isolation options); its own (MIG) agent again
    afterwards."""
    import json

    from slurm_plugin.agent import client
    from slurm_plugin.devcluster import node_side
    from slurm_plugin.devcluster.processes import alive_with

    procs = json.loads((cluster.state_dir / "run" / "processes.json").read_text())
    pid = next(p["pid"] for p in procs if p["role"] == "agent" and p["name"] == node)
    os.kill(pid, signal.SIGTERM)
    # ended: gone, or a zombie this process has not reaped yet (its command line is empty)
    wait_for(lambda: not alive_with(pid, str(cluster.state_dir)), 30, f"{node}'s agent ended")
    (_, _, args), = [p for p in node_side.processes(cluster.spec) if p[1] == node]
    args = [*args[: args.index("--isolation")], *isolation]
    log = open(cluster.workdir / f"mps-agent-{node}.log", "ab")
    agent = subprocess.Popen([*cluster.on_node(node), PY, "-m", "slurm_plugin", *args], env=cluster.env,
                             stdout=log, stderr=subprocess.STDOUT)
    try:
        sock = cluster.node_view(node) / "run" / f"agent-{node}.sock"
        def answers() -> bool:  # the old agent's socket file may still be there, refusing: not yet
            try:
                return sock.exists() and client.ask(sock, {"op": "ping"}).get("status") == "ok"
            except OSError:
                return False

        wait_for(answers, 60, f"{node}'s MPS agent answers")
        yield agent
    finally:
        agent.terminate()
        agent.wait(timeout=15)
        log.close()
        cluster.cancel_all()
        cluster.dev.up()  # the node's own (MIG) agent again
