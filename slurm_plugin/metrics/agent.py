"""A node agent's metrics: per GPU, the shares and MIG slices in use, the jobs whose
utilisation counters are unavailable; MIG reconfigurations.

Read at scrape time from the agent's assignments and from the GPU itself (the backend:
NVML, or the simulated GPU), under the agent's lock.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mig.errors import MigError
from slurm_plugin.agent import isolation as iso
from slurm_plugin.metrics.endpoint import new_registry

log = logging.getLogger(__name__)

KINDS = ("whole", "mig", "mps")


class AgentCollector(Collector):
    def __init__(self, agent):
        self._agent = agent

    def collect(self) -> Iterator[Metric]:
        a = self._agent
        node = a.node
        gpu_labels = ["node", "gpu"]
        fams = {
            "jobs": GaugeMetricFamily("gpupack_gpu_jobs", "Jobs isolated on this GPU by the node agent.", labels=gpu_labels),
            "shares": GaugeMetricFamily("gpupack_gpu_shares", "Shares (Slurm shards) this GPU is cut into.", labels=gpu_labels),
            "shares_used": GaugeMetricFamily("gpupack_gpu_shares_in_use", "Shares held by jobs (a whole-GPU job "
                                             "holds them all).", labels=gpu_labels),
            "slices": GaugeMetricFamily("gpupack_gpu_mig_slices", "MIG memory slices of this GPU (0: MIG off).",
                                        labels=gpu_labels),
            "slices_used": GaugeMetricFamily("gpupack_gpu_mig_slices_in_use", "MIG memory slices in instances a "
                                             "job holds.", labels=gpu_labels),
            "slices_idle": GaugeMetricFamily("gpupack_gpu_mig_slices_idle", "MIG memory slices in instances no job "
                                             "holds (made ready by a layout for the queue).", labels=gpu_labels),
        }
        by_kind = dict.fromkeys(KINDS, 0)
        with a.lock:
            assignments = list(a.jobs.values())
            try:
                gpus = a.backend.list_gpus()
            except MigError as exc:
                log.warning("metrics: cannot list the GPUs: %s", exc)
                gpus = []
            for g in gpus:
                labels = [node, str(g.index)]
                held = [x for x in assignments if x.gpu_index == g.index]
                shares = iso.ladder_shares(a.backend.catalog(g.index), a.shares_per_gpu)
                used = sum(shares if x.kind == "whole" else x.shards for x in held)
                fams["jobs"].add_metric(labels, len(held))
                fams["shares"].add_metric(labels, shares)
                fams["shares_used"].add_metric(labels, min(used, shares))
                slices = busy = idle = 0
                if g.mig_enabled:
                    slices = a.backend.catalog(g.index).memory_slices
                    owned = {x.gi_id for x in held if x.gi_id is not None}
                    for inst in a.backend.list_instances(g.index):
                        if inst.busy or inst.owner or inst.gi_id in owned:
                            busy += inst.size
                        else:
                            idle += inst.size
                fams["slices"].add_metric(labels, slices)
                fams["slices_used"].add_metric(labels, busy)
                fams["slices_idle"].add_metric(labels, idle)
            for x in assignments:
                if x.kind in by_kind:
                    by_kind[x.kind] += 1
            reconfigurations = a.reconfigurations
            unavailable = dict(a.sampler.counters.unavailable)
        yield from fams.values()
        yield _counters_unavailable(node, unavailable)
        jobs = GaugeMetricFamily("gpupack_node_jobs", "Jobs on this node by isolation: whole GPU, MIG slice or "
                                 "MPS share.", labels=["node", "isolation"])
        for kind, n in by_kind.items():
            jobs.add_metric([node, kind], n)
        yield jobs
        yield _reconfigurations(node, reconfigurations)


def _reconfigurations(node: str, n: int) -> CounterMetricFamily:
    fam = CounterMetricFamily("gpupack_mig_reconfigurations", "MIG instances this agent created or destroyed "
                              "since it started.", labels=["node"])
    fam.add_metric([node], n)
    return fam


def _counters_unavailable(node: str, by_gpu: dict[int, tuple[str, int]]) -> GaugeMetricFamily:
    fam = GaugeMetricFamily("gpupack_gpu_util_counters_unavailable",
                            "Jobs on this GPU whose utilisation the GPU's counters could not give in the last "
                            "sampling round (per-MIG-instance activity without DCGM, a driver without "
                            "per-process samples), by reason; the contention watch does not judge them by "
                            "utilisation.", labels=["node", "gpu", "reason"])
    for gpu, (reason, jobs) in sorted(by_gpu.items()):
        fam.add_metric([node, str(gpu), reason], jobs)
    return fam


def agent_registry(agent) -> CollectorRegistry:
    registry = new_registry()
    registry.register(AgentCollector(agent))
    return registry
