"""What the steering's pair prediction reads: the live pair knowledge and each node's GPUs.

- **pair knowledge** (`packer.pair_knowledge.PairKnowledge`, the simulator's model): pair
  speeds measured by the contention watch (the store's `pair_speeds`), the others predicted
  from both jobs' history (mean utilisation, peak memory, sharing label); a pair of a job
  with no history has no prediction and is no reason to keep a node off (1.0);
- **GPUs** (`packer.placement.NodeGpus`): each node's configured `gpu` GRES, less the GPUs
  held whole; on each, the packed jobs there from `gres_detail` (`shard:h100:2(IDX:0)`),
  holding their shares of the GPU's memory (`[packer] gpu_memory_gib / shares_per_gpu`).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from packer.config import GIB, PackerConfig
from packer.corunner import GpuLoad, PairSpeed, RunningJob
from packer.pair_knowledge import JobTraits, PairKnowledge
from store.db import Store
from slurm_plugin.slurm.gres import expand_hostlist
from slurm_plugin.slurm.model import Job, Node


def pair_knowledge(store: Store, fingerprints: Iterable[str]) -> PairKnowledge[str]:
    """The store's measured pair speeds, and the traits of `fingerprints` and of every
    fingerprint in a measured pair (the model is fitted on those)."""
    observed = {key: row.speed for key, row in store.pair_speeds().items()}
    wanted = set(fingerprints) | {fp for pair in observed for fp in pair}
    traits = {fp: JobTraits.from_history(e.mean_util_pct, e.peak_mem_bytes)
              for fp, e in store.estimates(wanted).items() if e.mean_util_pct is not None}
    return PairKnowledge(traits, observed)


def steering_speed(know: PairKnowledge[str]) -> PairSpeed:
    """`know.speed`, with an unknown pair taken as no slowdown (no evidence to steer by)."""
    def speed(a: str, b: str) -> float:
        s = know.speed(a, b)
        return 1.0 if s is None else s
    return speed


def node_gpus(nodes: Iterable[Node], jobs: Iterable[Job], config: PackerConfig,
              fingerprint_of: Callable[[Job], str | None],
              traits: dict[str, JobTraits]) -> dict[str, tuple[GpuLoad, ...]]:
    """Per node, the GPUs a packed job could land on (not held whole), with the packed
    jobs running on each."""
    share = config.share_bytes
    capacity = int(config.gpu_memory_gib * GIB)
    whole: set[tuple[str, int]] = set()
    packed: dict[tuple[str, int], list[RunningJob]] = {}
    for job in jobs:
        if job.state != "RUNNING":
            continue
        fp = fingerprint_of(job) or f"job{job.job_id}"
        t = traits.get(fp)
        for node, item in zip(expand_hostlist(job.nodes), job.gres_detail):
            for index in item.indexes or ():
                if item.name == "gpu":
                    whole.add((node, index))
                elif item.name == "shard":
                    packed.setdefault((node, index), []).append(RunningJob(
                        str(job.job_id), fp, int(item.count * share), t.util_pct if t else None))
    out = {}
    for n in nodes:
        out[n.name] = tuple(GpuLoad(f"{n.name}:{i}", capacity, tuple(packed.get((n.name, i), ())))
                            for i in range(n.gpus_total) if (n.name, i) not in whole)
    return out
