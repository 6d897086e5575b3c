"""The node agent measures a job's utilisation from the GPU's counters, without its help."""
from __future__ import annotations

import pytest

from gpus.sim.backend import SimGpuBackend
from gpus.sim.counters import CounterNoise
from slurm_plugin.agent.daemon import NodeAgent
from slurm_plugin.agent.state import BATCH_STEP

SHARD2 = {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0", "SLURM_SHARDS_ON_NODE": "2"}


class Clock:
    def __init__(self):
        self.t = 10_000.0

    def __call__(self):
        return self.t


@pytest.mark.parametrize("mode,source", [("mps", "nvml-process"), ("mig", "dcgm-gr-active")])
def test_a_job_that_never_reports_gets_its_utilisation_from_the_counters(tmp_path, mode, source):
    clock = Clock()
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB"], mig_enabled=(mode == "mig"), clock=clock,
                             noise=CounterNoise(dip_p=0.0))  # no checkpoint pause in these 10 s
    agent = NodeAgent("node1", tmp_path, backend, isolation_mode=mode, clock=clock)
    a = agent.isolate(9, BATCH_STEP, 0, SHARD2)
    backend.alloc_memory(a.device_uuid, a.owner, 1 << 30)
    backend.start_process(a.device_uuid, a.owner, "ResNet18", 60.0)
    utils = []
    for _ in range(10):
        clock.t += 1.0
        agent.tick()
        (sample,) = agent.samples(9, latest=True)
        assert sample["util_source"] == source and sample["throughput"] is None
        utils.append(sample["util_pct"])
    assert sum(utils) / len(utils) == pytest.approx(60, abs=8)
    assert agent.summary(a, "test")["mean_util_pct"] == pytest.approx(60, abs=8)


def test_without_counters_the_reported_utilisation_is_used_and_says_so(tmp_path):
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB"], mig_enabled=False)
    agent = NodeAgent("node1", tmp_path, backend, isolation_mode="mps")
    a = agent.isolate(9, BATCH_STEP, 0, SHARD2)
    a.util_pct = 42.0  # as a report would set it; no process computes on the GPU
    agent.tick()
    (sample,) = agent.samples(9, latest=True)
    assert sample["util_pct"] == 42.0 and sample["util_source"] == "report"
