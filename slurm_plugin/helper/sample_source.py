"""Where the monitor gets its JobSamples: the node agents, or anything with the same shape.

`SampleSource` is a callable taking the nodes that run jobs and returning the newest
samples; the real one asks each node agent over its socket (`run/agent-<node>.sock`, root
or the SlurmUser only). A node whose agent does not answer is skipped with a warning
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
    """Newest sample of every job, from each node's agent."""

    def __init__(self, state_dir: Path, timeout: float = 1.0):
        self.state_dir = Path(state_dir)
        self.timeout = timeout
        self._down: set[str] = set()

    def __call__(self, nodes: Iterable[str]) -> list[JobSample]:
        try:
            from slurm_plugin.agent.client import AgentUnavailable, samples
        except ImportError:  # the agent is not installed on this host
            return []
        out: list[JobSample] = []
        for node in sorted(set(nodes)):
            try:
                out.extend(samples(self.state_dir, node, latest=True, timeout=self.timeout))
                if node in self._down:
                    self._down.discard(node)
                    log.info("node agent of %s answers again", node)
            except (AgentUnavailable, PermissionError, OSError, ValueError, TypeError) as exc:
                if node not in self._down:
                    self._down.add(node)
                    log.warning("no samples from the node agent of %s: %s", node, exc)
        return out
