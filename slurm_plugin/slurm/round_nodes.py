"""One node listing per watcher round, whoever in the round asks for it.

A watcher round publishes the cluster view from the node listing, and its watches (steering,
dispatch, regroup, grow) read the nodes again: on a site of 2,000 nodes each listing is a
`REQUEST_NODE_INFO` that costs slurmctld tens of milliseconds under its node read lock (the
scale bench saw 2.3 of them a round). Within a round (`begin_round` opens the next one) the
first listing serves the rest, until a command of the runner changes a job (its `changes`
count). A runner no round was begun on (a CLI tool, the web view) lists the nodes every time.
"""
from __future__ import annotations

from slurm_plugin.slurm.model import Node, NodesDocument


class RoundNodes:
    """The `nodes()` of a Slurm runner: its `nodes_document()` once per round (see the module)."""

    _round: int | None = None
    _round_nodes: tuple[tuple[int, int], tuple[Node, ...]] | None = None
    changes: int

    def nodes_document(self) -> NodesDocument:
        raise NotImplementedError

    def begin_round(self) -> None:
        """The next round begins: the node listing taken before it is not used again."""
        self._round = (self._round or 0) + 1

    def nodes(self) -> list[Node]:
        """Every node with its GRES configured and in use."""
        if self._round is None:
            return list(self.nodes_document().nodes)
        key = (self._round, self.changes)
        held = self._round_nodes
        if held is not None and held[0] == key:
            return list(held[1])
        nodes = tuple(self.nodes_document().nodes)
        self._round_nodes = (key, nodes)
        return list(nodes)
