"""The MIG side of the simulated cluster: each GPU's partition and its instances.

:class:`MigState` holds what the MIG policies (:mod:`~simulator.mig_policies`)
read and the loop keeps up to date: the idle instances of each profile, the GPUs by free
memory slices (dynamic MIG), the GPUs with an idle instance, the GPUs partitioned for good
(``mig-static``), and the reconfiguration counters. A GPU's partition is a
``mig.fsm.PartitionState`` (the pure core's), its instances ``Gpu.inst`` (placement ->
job or None).
"""
from __future__ import annotations

import math

from mig.catalog import Catalog
from mig.fsm import PartitionState, Placement, get_space
from mig.layout import homogeneous_layout
from packer.rules import SuiteRules
from simulator.config import SimConfig
from simulator.state import Gpu, Job
from simulator.workload import SimJobSpec


class MigState:
    def __init__(self, cfg: SimConfig, catalog: Catalog, gpus: list[Gpu], idle: dict[int, None], rules: SuiteRules):
        self.catalog = catalog
        self.rules = rules
        self.space = get_space(catalog, tuple(p.name for p in catalog.profiles
                                              if not p.media_extensions))
        self.profiles = sorted(  # smallest first
            (p for p in self.space.catalog.profiles),
            key=lambda p: (p.memory_mib, p.compute_slices, p.memory_slices))
        self.creates = self.destroys = 0
        self.idle_inst: dict[str, dict[tuple[int, Placement], None]] = {
            p.name: {} for p in self.space.catalog.profiles}
        self.by_free: list[dict[int, None]] = [dict() for _ in range(catalog.memory_slices + 1)]
        self.has_idle: dict[int, None] = {}  # GPUs with an idle instance
        self.n_whole = cfg.gpus  # GPUs a job may take whole
        self.static_profiles: list = []  # mig-static: the profiles of its layout, smallest first
        self._prof_cache: dict = {}
        for g in gpus:
            g.state = self.space.empty()
        if cfg.policy == "mig-static":
            self._partition_static(cfg, gpus, idle)
        else:
            for g in gpus:
                self.by_free[catalog.memory_slices][g.id] = None

    def _partition_static(self, cfg: SimConfig, gpus: list[Gpu], idle: dict[int, None]) -> None:
        layout = self._static_layout(cfg.mig_static_layout)
        n_static = int(round(cfg.mig_static_fraction * cfg.gpus))
        self.n_whole = cfg.gpus - n_static
        for g in gpus[:n_static]:
            g.static = True
            g.state = layout
            for p in layout.placements:
                g.inst[p] = None
                self.idle_inst[p.profile][(g.id, p)] = None
            del idle[g.id]  # never lent whole
        self.static_profiles = sorted(
            {self.space.catalog.profile(p.profile) for p in layout.placements},
            key=lambda p: (p.memory_mib, p.compute_slices))

    def _static_layout(self, text: str | None) -> PartitionState:
        if not text:
            smallest = self.profiles[0].name
            return homogeneous_layout(self.space.empty(), smallest)
        if "@" in text:
            return PartitionState.parse(self.space, text)
        return homogeneous_layout(self.space.empty(), text.strip())

    def static_fits(self, s: SimJobSpec) -> bool:
        """Whether a job too big for the whole GPUs fits one of the static instances."""
        return s.gpus == 1 and any(p.memory_mib << 20 >= s.mem0 for p in self.static_profiles)

    def sizes(self) -> tuple[int, ...]:
        """The instances' memory sizes, bytes, smallest first."""
        return tuple(sorted({p.memory_mib << 20 for p in self.profiles}))

    # ----------------------------------------------------------------- sizing a job
    def profile_for(self, job: Job):
        """The profile of the job's slice, as the node agent picks it (``SuiteRules.mig_profile``):
        the smallest holding its memory in shares (the largest when none does)."""
        shards = self.shards_of(max(job.mem0, job.remembered))
        hit = self._prof_cache.get(shards)
        if hit is None:
            hit = self._prof_cache[shards] = self.rules.mig_profile(self.space.catalog, shards) or self.profiles[-1]
        return hit

    def shards_of(self, need_bytes: float) -> int:
        """The shares that hold ``need_bytes`` (the packer's share: a memory slice)."""
        return max(1, math.ceil(need_bytes / self.rules.config.share_bytes))

    def slice_bytes(self, shards: int) -> int:
        """The memory of the slice a job of ``shards`` shares gets."""
        p = self.rules.mig_profile(self.space.catalog, shards) or self.profiles[-1]
        return p.memory_mib << 20

    # ----------------------------------------------------------------- partitions
    def set_free(self, g: Gpu, n: int | None) -> None:
        """File ``g`` under ``n`` free memory slices (None: not at all, it is held whole)."""
        for d in self.by_free:
            d.pop(g.id, None)
        if n is not None:
            self.by_free[n][g.id] = None

    def refresh_free(self, g: Gpu) -> None:
        if not g.static and not g.whole:
            self.set_free(g, g.state.free_memory_slices)

    def create(self, g: Gpu, p: Placement) -> None:
        g.state = g.state.alloc(p.profile, p.start)
        g.inst[p] = None
        self.idle_inst[p.profile][(g.id, p)] = None
        self.has_idle[g.id] = None
        self.creates += 1

    def destroy(self, g: Gpu, p: Placement) -> None:
        """Destroy ``g``'s idle instance ``p``."""
        g.state = g.state.free(p.profile, p.start)
        del g.inst[p]
        self.idle_inst[p.profile].pop((g.id, p), None)
        self.destroys += 1

    def clear_idle_instances(self, g: Gpu) -> None:
        for p, j in list(g.inst.items()):
            if j is None:
                self.destroy(g, p)
        self.has_idle.pop(g.id, None)

    def occupy(self, g: Gpu, p: Placement, job: Job) -> None:
        """``job`` takes ``g``'s idle instance ``p``."""
        self.idle_inst[p.profile].pop((g.id, p), None)
        g.inst[p] = job
        g.busy += 1
        if all(v is not None for v in g.inst.values()):
            self.has_idle.pop(g.id, None)

    def vacate(self, g: Gpu, p: Placement) -> None:
        """``g``'s instance ``p`` is idle again."""
        g.inst[p] = None
        g.busy -= 1
        self.idle_inst[p.profile][(g.id, p)] = None
        self.has_idle[g.id] = None
