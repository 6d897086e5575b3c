"""Where the monitor gets its JobSamples: the node agents, or anything with the same shape.

`SampleSource` is a callable taking the nodes that run jobs and returning their samples;
the real one asks each node agent over its socket (`run/agent-<node>.sock`, root or the
SlurmUser only): the newest sample of each job the first time, then every sample taken
since the newest it has seen from that node, so a round stretched by a slow Slurm loses
no agent sample (the counters' contention check counts samples, not rounds). A node whose agent does not answer is skipped with a warning
(once per outage), never an exception into the monitor loop.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from packer.samples import JobSample

log = logging.getLogger(__name__)


class SampleSource(Protocol):
    def __call__(self, nodes: Iterable[str]) -> list[JobSample]: ...


class AgentSamples:
    """Every job's samples since the last call (the newest only, the first time), from each
    node's agent; oldest first."""

    def __init__(self, state_dir: Path, timeout: float = 1.0):
        self.state_dir = Path(state_dir)
        self.timeout = timeout
        self._down: set[str] = set()
        self._seen: dict[str, float] = {}  # node -> newest sample time it sent (its own clock)

    def __call__(self, nodes: Iterable[str]) -> list[JobSample]:
        try:
            from slurm_plugin.agent.client import AgentUnavailable, samples
        except ImportError:  # the agent is not installed on this host
            return []
        out: list[JobSample] = []
        for node in sorted(set(nodes)):
            try:
                since = self._seen.get(node)
                got = samples(self.state_dir, node, latest=since is None, since=since, timeout=self.timeout)
                if got:
                    self._seen[node] = max(x.at for x in got)
                out.extend(sorted(got, key=lambda x: x.at))
                if node in self._down:
                    self._down.discard(node)
                    log.info("node agent of %s answers again", node)
            except (AgentUnavailable, PermissionError, OSError, ValueError, TypeError) as exc:
                if node not in self._down:
                    self._down.add(node)
                    log.warning("no samples from the node agent of %s: %s", node, exc)
        return out
