"""What the steering's pair prediction reads besides the pair model (the submit path's,
`helper.submit_admission.pair_predictor_of`): each node's GPUs.

- **GPUs** (`packer.placement.NodeGpus`): each node's configured `gpu` GRES, less the GPUs
  held whole; on each, the packed jobs there from `gres_detail` (`shard:h100:2(IDX:0)`),
  holding their shares of the GPU's memory (`[packer] gpu_memory_gib / shares_per_gpu`).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from packer.config import GIB, PackerConfig
from packer.corunner import GpuLoad, RunningJob
from slurm_plugin.slurm.gres import expand_hostlist
from slurm_plugin.slurm.model import Job, Node


def node_gpus(nodes: Iterable[Node], jobs: Iterable[Job], config: PackerConfig,
              fingerprint_of: Callable[[Job], str | None],
              utils: Mapping[str, float | None]) -> dict[str, tuple[GpuLoad, ...]]:
    """Per node, the GPUs a packed job could land on (not held whole), with the packed
    jobs running on each (`utils`: each workload's mean utilisation alone, where known)."""
    share = config.share_bytes
    capacity = int(config.gpu_memory_gib * GIB)
    whole: set[tuple[str, int]] = set()
    packed: dict[tuple[str, int], list[RunningJob]] = {}
    for job in jobs:
        if job.state != "RUNNING":
            continue
        fp = fingerprint_of(job) or f"job{job.job_id}"
        for node, item in zip(expand_hostlist(job.nodes), job.gres_detail):
            for index in item.indexes or ():
                if item.name == "gpu":
                    whole.add((node, index))
                elif item.name == "shard":
                    packed.setdefault((node, index), []).append(RunningJob(
                        str(job.job_id), fp, int(item.count * share), utils.get(fp)))
    out = {}
    for n in nodes:
        out[n.name] = tuple(GpuLoad(f"{n.name}:{i}", capacity, tuple(packed.get((n.name, i), ())))
                            for i in range(n.gpus_total) if (n.name, i) not in whole)
    return out
