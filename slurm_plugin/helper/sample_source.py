"""Where the monitor gets its JobSamples, and which nodes' figures are stale.

`SampleSource` is a callable taking the nodes that run jobs and returning their samples. The
real one, :class:`AgentSamples`, asks every node's agent over the MUNGE-authenticated link
(:mod:`slurm_plugin.agent.client`), in parallel, once per round:

1. it pushes the node's job list (the jobs Slurm runs there, from the round's one listing),
   so agents never ask slurmctld themselves;
2. it takes the newest sample of each job the first time, then every sample taken since the
   newest it has seen from that node, so a round stretched by a slow Slurm loses no agent
   sample (the counters' contention check counts samples, not rounds).

A node is **stale** while its agent does not answer (down, cut off, refused, an answer that
is not believed) or its newest sampling round is older than ``stale_after_s`` by the agent's own
clock; ``stale`` maps each such node to the reason. Nothing is packed onto a stale node and no
run-time action is taken on its jobs (the monitor passes ``stale`` on); it recovers when the
agent answers again with fresh samples. A failure is logged once per outage, never raised
into the monitor loop. With an :class:`~.agreement.Agreement`, a node whose agent disagrees
with the helper (shares per GPU, GPU type, versions) is stale too, for that reason, until it
agrees.
"""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from packer.samples import JobSample
from slurm_plugin.helper.slurm_poll import ACTIVE
from slurm_plugin.slurm.gres import expand_hostlist
from slurm_plugin.slurm.model import Job
from slurm_plugin.slurm.stdio import output_paths

log = logging.getLogger(__name__)

AGENT_THREADS = 16
_NEWER = re.compile(r"jobs generation \d+ is older than (\d+)")


class SampleSource(Protocol):
    def __call__(self, nodes: Iterable[str]) -> list[JobSample]: ...


def job_outputs_by_node(jobs: Iterable[Job]) -> dict[str, dict[int, dict]]:
    """node -> {job: {"uid", "paths"}}: where Slurm writes the output of each job that holds its
    nodes, by its record (`slurm_plugin.slurm.stdio`), for the agents to read an ended step's tail
    with the user's rights (`slurm_plugin.agent.output_tail`). Every state in which the job is
    named to its agents counts (a job listed while CONFIGURING runs its batch step already): a
    job named without its paths has its step's end judged without its output. Jobs whose user or
    paths are unknown are left out."""
    out: dict[str, dict[int, dict]] = {}
    for job in jobs:
        if job.state not in ACTIVE or job.user_id is None:
            continue
        for node in expand_hostlist(job.nodes):
            paths = output_paths(job, job.batch_host or node)
            if paths:
                out.setdefault(node, {})[job.job_id] = {"uid": job.user_id, "paths": list(paths)}
    return out


class AgentSamples:
    """Every job's samples since the last call (the newest only, the first time), from each
    node's agent over the link; oldest first. ``tell_jobs`` sets the job lists the next call
    pushes."""

    def __init__(self, link, stale_after_s: float = 15.0, clock=time.time, agreement=None):
        self.link = link
        self.agreement = agreement  # an agreement.Agreement, or None: not checked
        self.stale_after_s = stale_after_s
        self.clock = clock
        self.stale: dict[str, str] = {}  # node -> why its figures are not trusted
        self._seen: dict[str, float] = {}  # node -> newest sample time it sent (its own clock)
        self._jobs: Mapping[str, list[int]] = {}
        self._outputs: Mapping[str, dict[int, dict]] = {}  # node -> job -> its output's uid and paths
        self._gpus: dict[str, dict[int, tuple[int, ...]]] = {}
        self._shards: dict[str, dict[int, int]] = {}
        self.oom_ends: dict[str, tuple[dict, ...]] = {}  # node -> out-of-memory ends its agent holds
        self.unisolated: dict[str, tuple[dict, ...]] = {}  # node -> root's records of packed steps not started
        self._generation = 0
        self._pool = ThreadPoolExecutor(max_workers=AGENT_THREADS, thread_name_prefix="agent-link")

    def tell_jobs(self, jobs_by_node: Mapping[str, list[int]],
                  gpus_by_node: Mapping[str, Mapping[int, tuple[int, ...]]] | None = None,
                  shards_by_node: Mapping[str, Mapping[int, int]] | None = None) -> None:
        """The jobs Slurm runs on each node now, and the GPUs and shards Slurm gave each there (its
        record, which the agent checks a step's own variables against); pushed to every agent on the
        next call."""
        self._jobs = dict(jobs_by_node)
        self._gpus = {n: dict(g) for n, g in (gpus_by_node or {}).items()}
        self._shards = {n: dict(s) for n, s in (shards_by_node or {}).items()}
        self._generation = max(self._generation + 1, int(self.clock() * 1000))

    def tell_outputs(self, outputs_by_node: Mapping[str, dict[int, dict]]) -> None:
        """Where each node's jobs write their output (`job_outputs_by_node`); pushed with the
        next job lists."""
        self._outputs = dict(outputs_by_node)

    def known_nodes(self) -> list[str]:
        nodes = getattr(self.link.directory, "nodes", None)
        return list(nodes()) if nodes else []

    def __call__(self, nodes: Iterable[str]) -> list[JobSample]:
        every = sorted(set(nodes) | set(self.known_nodes()) | set(self._jobs))
        out: list[JobSample] = []
        for node, got in zip(every, self._pool.map(self._one, every)):
            out.extend(got)
        return out

    def _one(self, node: str) -> list[JobSample]:
        from slurm_plugin.agent.client import AgentRefused, AgentUnavailable, sample_batch

        try:
            self._push(node)
            since = self._seen.get(node)
            batch = sample_batch(self.link, node, latest=since is None, since=since)
        except (AgentUnavailable, AgentRefused, OSError, ValueError, TypeError) as exc:
            self._mark(node, f"its agent does not answer ({exc})")
            return []
        self.oom_ends[node] = batch.oom_ends
        self.unisolated[node] = batch.unisolated
        if batch.samples:
            self._seen[node] = max(x.at for x in batch.samples)
        try:
            disagree = self.agreement.check(node, batch.facts) if self.agreement is not None else []
        except (AgentUnavailable, OSError) as exc:
            self._mark(node, f"its agent does not answer ({exc})")
            return sorted(batch.samples, key=lambda x: x.at)
        age = batch.age_s
        if disagree:
            self._mark(node, "its agent disagrees with the helper: " + "; ".join(disagree))
        elif age is None or age > self.stale_after_s:
            self._mark(node, "its agent has not sampled yet" if age is None
                       else f"its agent's newest samples are {age:.0f} s old")
        elif node in self.stale:
            log.info("node agent of %s answers again with fresh samples (was stale: %s)", node,
                     self.stale.pop(node))
        return sorted(batch.samples, key=lambda x: x.at)

    def _push(self, node: str) -> None:
        """Push the node's job list. An agent that holds a newer generation than this helper's
        (the helper's clock was set back: generations outlive restarts on both sides) refuses
        it; the helper then counts on from the agent's and pushes again, once."""
        from slurm_plugin.agent.client import AgentRefused, push_jobs

        try:
            push_jobs(self.link, node, self._jobs.get(node, []), self._generation, self._outputs.get(node),
                      self._gpus.get(node), self._shards.get(node))
        except AgentRefused as exc:
            newer = _NEWER.search(str(exc))
            if newer is None:
                raise
            log.warning("the agent of %s has job list generation %s, newer than this helper's %d (was the "
                        "helper's clock set back?): counting on from it", node, newer.group(1), self._generation)
            self._generation = max(self._generation, int(newer.group(1)) + 1)
            push_jobs(self.link, node, self._jobs.get(node, []), self._generation, self._outputs.get(node),
                      self._gpus.get(node), self._shards.get(node))

    def _mark(self, node: str, reason: str) -> None:
        if node not in self.stale:
            log.warning("node %s is stale: %s; nothing is packed there and no action is taken on its jobs",
                        node, reason)
        self.stale[node] = reason
