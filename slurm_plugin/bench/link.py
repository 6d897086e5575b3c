"""Figures of the helper <-> agent link (measured, never asserted by tests).

- :func:`run_latency_bench`: N authenticated ``samples`` requests to one agent, timed one by one
  (credential made, HTTP round trip, the agent's checks and signature, the helper's check);
  against a dev cluster's agent, or a standalone one (a private munged, an agent in this
  process on 127.0.0.1 with simulated jobs).
- :func:`run_rpc_count`: slurmctld RPCs per watcher round with N nodes and J running jobs,
  counted as commands in a fake Slurm: the watcher's own, plus what the agents asked when each
  ran ``squeue --nodelist`` every reconcile interval (before) against nothing (after: the
  helper pushes the job lists over the link).
"""
from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from slurm_plugin.agent.client import AgentLink, samples


@dataclass
class LatencyBench:
    target: str
    munge_backend: str
    requests: int
    samples_per_answer: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


def time_requests(link: AgentLink, node: str, requests: int, target: str) -> LatencyBench:
    got = samples(link, node, latest=True)  # warm: the connection is opened once
    took = []
    for _ in range(requests):
        start = time.perf_counter()
        got = samples(link, node, latest=True)
        took.append((time.perf_counter() - start) * 1000)
    return LatencyBench(target, link.munge.backend, requests, len(got), round(_percentile(took, 50), 3),
                        round(_percentile(took, 99), 3), round(statistics.fmean(took), 3), round(max(took), 3))


def run_latency_bench(requests: int, jobs: int = 4, munge_backend: str = "auto") -> LatencyBench:
    """Standalone: a private munged and an agent with ``jobs`` simulated jobs on 127.0.0.1."""
    from gpus.sim.backend import SimGpuBackend
    from slurm_plugin.agent.daemon import NodeAgent
    from slurm_plugin.agent.directory import AgentAddress
    from slurm_plugin.agent.link_server import AgentLinkServer
    from slurm_plugin.agent.slurm_jobs import PushedJobs
    from slurm_plugin.agent.state import BATCH_STEP
    from slurm_plugin.munge_auth import Munge, PrivateMunged, RequestVerifier

    with PrivateMunged() as munged, tempfile.TemporaryDirectory() as state:
        munge = Munge(munged.socket, munge_backend)
        gpus = max(1, (jobs + 6) // 7)
        agent = NodeAgent("node1", Path(state), SimGpuBackend(None, "node1", gpus=["H100-80GB"] * gpus),
                          list_running_jobs=PushedJobs())
        for job in range(jobs):
            agent.isolate(job + 1, BATCH_STEP, 0, {"SLURM_JOB_GPUS": str(job // 7), "SLURM_SHARDS_ON_NODE": "1"})
        agent.tick()
        server = AgentLinkServer(("127.0.0.1", 0), agent, RequestVerifier(munge, "node1", {0}))
        server.serve_in_thread()
        try:
            address = AgentAddress("127.0.0.1", server.server_address[1])
            return time_requests(AgentLink(lambda n: address, munge, {0}), "node1", requests,
                                 "standalone agent on 127.0.0.1 (in-process server thread)")
        finally:
            server.shutdown()
            server.server_close()


@dataclass
class RpcCount:
    nodes: int
    running_jobs: int
    pending_jobs: int
    round_s: float
    reconcile_s: float
    watcher_per_round: float  # the watcher's own Slurm commands per round
    watcher_commands: list[str]  # which
    agents_before_per_round: float  # agents' `squeue --nodelist` per watcher round, before
    agents_after_per_round: float  # after: the helper pushes job lists (no agent asks slurmctld)
    address_refresh_per_round: float  # after: NodeAddr asked of Slurm once a minute (none with [agents])
    before_per_round: float
    after_per_round: float


def run_rpc_count(nodes: int, jobs: int, pending: int, rounds: int, round_s: float = 1.0,
                  reconcile_s: float = 5.0) -> RpcCount:
    """Count the Slurm commands of ``rounds`` watcher rounds (a fake Slurm, the real monitor,
    agents answering in memory) and of the agents' reconcile over the same time."""
    from packer.config import PackerConfig
    from store.db import Store
    from slurm_plugin.helper.monitor import Monitor
    from slurm_plugin.helper.monitor_settings import MonitorSettings
    from slurm_plugin.helper.sample_source import AgentSamples
    from slurm_plugin.slurm.fake import FakeNode, FakeSlurm
    from slurm_plugin.slurm.runner import SlurmRunner

    fake = FakeSlurm()
    fake.nodes = {f"node{i}": FakeNode(f"node{i}") for i in range(1, nodes + 1)}
    for j in range(jobs):
        node = f"node{j % nodes + 1}"
        fake.submit(job_id=j + 1, state="RUNNING", nodes=node, gres="gres:shard:1",
                    gres_detail=[f"shard:h100:1(IDX:{(j // nodes) % 2})"])
    for j in range(pending):
        fake.submit(job_id=jobs + j + 1, state="PENDING", gres="gres:gpu:1")

    class Agents:  # every agent answers at once, from memory (the link's cost is not counted here)
        directory = staticmethod(lambda node: None)

        def call(self, node, op, request=None, timeout=None):
            return {"status": "ok", "samples": [], "sampled_at": 1.0, "now": 1.0, "changes": []}

    class Helper:
        def __init__(self, folder: Path):
            self.paths = type("P", (), {"database": folder / "db", "socket": folder / "sock", "slurm_conf": None})()
            self.store = Store(self.paths.database)

        def config(self) -> PackerConfig:
            return PackerConfig(mode="enforce")

    with tempfile.TemporaryDirectory() as folder:
        helper = Helper(Path(folder))
        runner = SlurmRunner(executor=fake)
        # on_jobs: the watcher publishes the submit side's view from the round's listing and
        # one node listing (helper.watcher.Watcher.publish_from_jobs)
        monitor = Monitor(helper, runner=runner, samples=AgentSamples(Agents()),
                          settings=MonitorSettings(interval_s=round_s), on_jobs=lambda jobs, at: runner.nodes())
        monitor.agents = Agents()
        monitor.tick()  # the first round reads the version and such once
        fake.calls.clear()
        for _ in range(rounds):
            monitor.tick()
        watcher = len(fake.calls) / rounds
        commands = sorted({" ".join(c[:2]) for c in fake.calls})
        fake.calls.clear()
        for node in fake.nodes:  # what every agent ran each reconcile before (slurm_jobs.running_jobs_lister)
            runner.job_ids_on_node(node)
        agents_per_reconcile = len(fake.calls)
        helper.store.close()
    from slurm_plugin.agent.directory import ADDRESS_REFRESH_S

    before_agents = agents_per_reconcile * round_s / reconcile_s
    refresh = round_s / ADDRESS_REFRESH_S
    return RpcCount(nodes, jobs, pending, round_s, reconcile_s, round(watcher, 2), commands, round(before_agents, 2), 0.0,
                    round(refresh, 3), round(watcher + before_agents, 2), round(watcher + refresh, 2))
