"""A cluster view for the submit side that does not move (``SubmitService``'s ``view``):
a set number of idle whole GPUs and, optionally, a published snapshot (a callable: a test
may give one that raises or sleeps). Reservations are counted, not subtracted."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from packer.decision import ClusterView
from slurm_plugin.helper.cluster_view import Snapshot


@dataclass
class FixedView:
    cluster: ClusterView | Callable[[], ClusterView] = ClusterView(0)
    published: Callable[[], Snapshot | None] = lambda: None
    reserved: int = 0

    def view(self) -> ClusterView:
        return self.cluster() if callable(self.cluster) else self.cluster

    def snapshot(self) -> Snapshot | None:
        return self.published()

    def reserve_whole_gpu(self) -> None:
        self.reserved += 1
