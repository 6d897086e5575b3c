"""A packed job's MPS share (`slurm_plugin.agent.mps_shares`) on its own: which daemon and which
plan entry a job counts on, which MPS-shared MIG instance a small job joins, the helper's plan
read back, and a whole GPU's share with its daemon (the stand-in control program, conftest) and
exclusive-process mode, from its first job to its last."""
from __future__ import annotations

import json

import pytest

from gpus.sim.backend import SimGpuBackend
from mig.backend import COMPUTE_DEFAULT, COMPUTE_EXCLUSIVE_PROCESS
from slurm_plugin.agent.mps_shares import MpsShares, mps_key, plan_key, pool_for
from slurm_plugin.agent.paths import AgentError, AgentPaths
from slurm_plugin.agent.state import Assignment


def job(job_id: int, *, gpu: int = 0, uid: int = 1000, shards: int = 1, gi: int | None = None,
        uuid: str | None = "MIG-a", profile: str | None = "1g.10gb", start: int | None = 0,
        kind: str = "mps") -> Assignment:
    whole = gi is None
    return Assignment(job_id, "node1", gpu, kind, "", shards=shards, uid=uid, gi_id=gi,
                      profile=None if whole else profile, start=None if whole else start,
                      device_uuid=uuid)


class Jobs:
    """The MIG manager's one call MpsShares makes on a GPU without MIG: the jobs isolated now."""

    def __init__(self, *jobs: Assignment):
        self.jobs = list(jobs)

    def assignments(self) -> list[Assignment]:
        return list(self.jobs)


def shares(tmp_path, backend=None, jobs: Jobs | None = None, in_mig: int = 0) -> MpsShares:
    return MpsShares(AgentPaths(tmp_path, "node1"), backend, jobs or Jobs(), shares_per_gpu=None,
                     mps_in_mig_shares=in_mig)


def test_a_job_counts_on_its_gpu_or_on_its_mig_instance():
    whole, sliced = job(1, gpu=2, uuid="GPU-x"), job(2, gpu=2, gi=5, profile="2g.20gb", start=4)
    assert mps_key(whole) == "gpu2" and mps_key(sliced) == "gpu2-gi5"
    assert plan_key(whole) != plan_key(sliced)
    assert plan_key(sliced) == plan_key(job(3, gpu=2, gi=5, profile="2g.20gb", start=4))  # one instance, one key
    assert plan_key(sliced) != plan_key(job(4, gpu=2, gi=6, profile="2g.20gb", start=6))


def test_a_small_job_joins_its_users_instance_with_room_only():
    mine = job(1, gi=3, uuid="MIG-a", shards=2)
    theirs = job(2, uid=2000, gi=4, uuid="MIG-b", shards=1)
    new = job(9, shards=1)
    assert pool_for([mine, theirs], new, capacity=4) is mine
    assert pool_for([mine, theirs], job(9, shards=2), capacity=4) is mine  # 2 + 2 fills it
    assert pool_for([mine, theirs], job(9, shards=3), capacity=4) is None  # 2 + 3 > 4
    assert pool_for([mine, job(3, gi=3, uuid="MIG-a", shards=1)], job(9, shards=2), capacity=4) is None  # full
    assert pool_for([theirs], new, capacity=4) is None  # another user's instance
    assert pool_for([job(1, gpu=1, gi=3)], new, capacity=4) is None  # another GPU
    assert pool_for([job(1, gi=None, uuid="GPU-x")], new, capacity=4) is None  # a whole GPU's share
    assert pool_for([job(1, gi=3, kind="mig")], new, capacity=4) is None  # a MIG slice, not MPS-shared
    assert pool_for([job(9, gi=3, shards=1)], job(9, shards=1), capacity=4) is None  # never itself


def test_only_a_small_job_on_a_node_that_shares_instances_goes_through_mps(tmp_path):
    assert shares(tmp_path, in_mig=4).wants_mig_share(job(1, shards=3))
    assert not shares(tmp_path, in_mig=4).wants_mig_share(job(1, shards=4))
    assert not shares(tmp_path, in_mig=0).wants_mig_share(job(1, shards=1))


@pytest.mark.parametrize("doc, pct", [
    ({"plan": {"gpu0": {"7": 35}}}, 35),
    ({"plan": {"gpu0": {"7": 100}}}, 100),
    ({"plan": {"gpu0": {"8": 35}}}, None),  # another job's
    ({"plan": {"gpu1": {"7": 35}}}, None),  # another device's
    ({"plan": {"gpu0": {"7": 0}}}, None),
    ({"plan": {"gpu0": {"7": 101}}}, None),
    ({"plan": {"gpu0": {"7": True}}}, None),
    ({"plan": {"gpu0": {"7": "35"}}}, None),
    ({"plan": ["gpu0"]}, None),
])
def test_the_helpers_plan_is_read_back_only_as_a_percentage(tmp_path, doc, pct):
    mps = shares(tmp_path)
    assert mps.planned_pct("gpu0", 7) is None  # no plan yet
    mps.paths.mps_plan.parent.mkdir(parents=True)
    mps.paths.mps_plan.write_text(json.dumps(doc))
    assert mps.planned_pct("gpu0", 7) == pct


def test_a_job_left_on_an_mps_shared_instance_keeps_it(tmp_path):
    a, b = job(1, gi=3, uuid="MIG-a"), job(2, gi=3, uuid="MIG-a")
    mps = shares(tmp_path, jobs=Jobs(a, b, job(3, gi=4, uuid="MIG-b")))
    assert mps.holder_after(a) is b and mps.holder_after(b) is a
    assert mps.holder_after(job(3, gi=4, uuid="MIG-b")) is None  # alone on its instance
    assert mps.holder_after(job(4, gi=None, uuid="GPU-x")) is None  # a whole GPU's share


def test_a_whole_gpu_share_from_its_first_job_to_its_last(tmp_path):
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB"], mig_enabled=False)
    gpu = backend.list_gpus()[0]
    jobs = Jobs()
    mps = shares(tmp_path, backend, jobs)
    a = mps.share(job(9, uuid=None, shards=2), gpu)
    jobs.jobs.append(a)
    assert a.isolation == f"mps:{a.env['CUDA_MPS_ACTIVE_THREAD_PERCENTAGE']}" and a.device_uuid == gpu.uuid
    assert 0 < a.mem_limit_bytes < gpu.memory_mib << 20
    assert a.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={a.mem_limit_bytes >> 20}M"
    assert mps.daemons.pid("gpu0") is not None
    assert backend.compute_mode(0) == COMPUTE_EXCLUSIVE_PROCESS
    with pytest.raises(AgentError, match="MPS servers are per user"):
        mps.share(job(10, uid=2000, uuid=None), gpu)

    # the helper measured the GPU's jobs: a later step starts with the planned share
    mps.paths.mps_plan.parent.mkdir(parents=True)
    mps.paths.mps_plan.write_text(json.dumps({"plan": {plan_key(a): {"9": 70}}}))
    mps.apply_plan(a)
    assert a.isolation == "mps:70" and a.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "70"
    assert a.env["GPUPACK_ISOLATION"] == "mps:70"

    mps.released(a)  # the GPU's last MPS job: its daemon stops, the compute mode goes back
    jobs.jobs.clear()
    assert mps.daemons.pid("gpu0") is None
    assert backend.compute_mode(0) == COMPUTE_DEFAULT


def test_the_watch_starts_a_needed_daemon_again_and_stops_an_unneeded_one(tmp_path):
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB", "H100-80GB"], mig_enabled=False)
    gpus = backend.list_gpus()
    jobs = Jobs()
    mps = shares(tmp_path, backend, jobs)
    a = mps.share(job(9, uuid=None), gpus[0])
    b = mps.share(job(10, gpu=1, uuid=None), gpus[1])
    jobs.jobs.append(a)  # job 10 is no longer one of the agent's jobs
    mps.daemons.stop("gpu0")  # job 9's daemon died
    done = mps.watch()
    assert mps.daemons.pid("gpu0") is not None
    assert mps.daemons.pid("gpu1") is None and "MPS daemon gpu1 stopped: no MPS job uses it" in done
    assert backend.compute_mode(1) == COMPUTE_DEFAULT and b.device_uuid == gpus[1].uuid
    mps.released(a)
