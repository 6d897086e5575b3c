"""The node agent against the stateful simulated GPU: isolate, end, restart and reconcile."""
import json

import pytest

from gpus.sim.backend import SimGpuBackend
from slurm_plugin.agent.daemon import AgentError, NodeAgent, final_path
from slurm_plugin.agent.state import BATCH_STEP

SHARD2 = {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0", "SLURM_SHARDS_ON_NODE": "2"}


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture
def world(tmp_path):
    running: set[int] = set()
    backend = SimGpuBackend(tmp_path / "sim", "node1", gpus=["H100-80GB", "H100-80GB"])
    clock = Clock()

    def make(**kw):
        return NodeAgent("node1", tmp_path, backend, list_running_jobs=lambda: set(running),
                         sim_dir=tmp_path / "sim", clock=clock, **kw)

    return make, backend, running, clock, tmp_path


def test_packed_job_gets_a_mig_device_placed_by_the_state_machine(world):
    make, backend, *_ = world
    agent = make()
    a = agent.isolate(7, BATCH_STEP, 1000, SHARD2)
    assert a.isolation.startswith("mig:1g.20gb@")
    assert a.env["CUDA_VISIBLE_DEVICES"].startswith("MIG-") and a.env["GPUPACK_SIM_DEVICE"] == a.env["CUDA_VISIBLE_DEVICES"]
    (inst,) = backend.list_instances(0)
    assert inst.owner == "7" and inst.uuid == a.device_uuid
    # a second step of the same job gets the same device
    assert agent.isolate(7, 0, 1000, SHARD2).device_uuid == a.device_uuid
    assert len(backend.list_instances(0)) == 1


def test_whole_gpu_keeps_slurms_devices(world):
    make, backend, *_ = world
    a = make().isolate(8, BATCH_STEP, 0, {"SLURM_JOB_GPUS": "1", "CUDA_VISIBLE_DEVICES": "1"})
    assert a.isolation == "whole" and "CUDA_VISIBLE_DEVICES" not in a.env
    assert backend.list_instances(1)[0].profile == "7g.80gb"


def test_mps_share(tmp_path):
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB"], mig_enabled=False)
    a = NodeAgent("node1", tmp_path, backend, isolation_mode="mps").isolate(9, BATCH_STEP, 0, SHARD2)
    assert a.isolation == "mps:40"  # 2 of the H100's 5 shares (its share ladder)
    assert a.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"
    assert a.env["CUDA_MPS_PIPE_DIRECTORY"].endswith("gpu0/pipe") and a.env["CUDA_MPS_LOG_DIRECTORY"].endswith("gpu0/log")
    assert int(a.env["GPUPACK_MEM_LIMIT_BYTES"]) == int(81559 * 1024 * 1024 * 2 / 5)


def test_full_gpu_refuses_with_a_reason(world):
    make, *_ = world
    agent = make()
    agent.isolate(1, BATCH_STEP, 0, {**SHARD2, "SLURM_SHARDS_ON_NODE": "5"})  # all 5 shares: 7g.80gb
    with pytest.raises(AgentError, match="no MIG profile of H100-80GB holds 8 shares"):
        agent.isolate(3, BATCH_STEP, 0, {**SHARD2, "SLURM_SHARDS_ON_NODE": "8"})
    with pytest.raises(AgentError, match="no room for 1g.10gb on GPU 0"):
        agent.isolate(2, BATCH_STEP, 0, {**SHARD2, "SLURM_SHARDS_ON_NODE": "1"})


def test_batch_step_end_writes_the_summary_and_frees_the_instance(world):
    make, backend, _, clock, tmp = world
    agent = make()
    a = agent.isolate(7, BATCH_STEP, 0, SHARD2)
    backend.alloc_memory(a.device_uuid, "7", 3 << 30)
    agent.tick()
    backend.free_memory(a.device_uuid, "7", 1 << 30)
    agent.tick()
    assert agent.step_end(7, 0) is None  # another step: nothing freed
    summary = agent.step_end(7, BATCH_STEP)
    assert summary["peak_mem_bytes"] == 3 << 30 and summary["isolation"] == a.isolation
    assert json.loads(final_path(tmp, "node1", 7).read_text())["peak_mem_bytes"] == 3 << 30
    assert backend.list_instances(0) == [] and backend.memory_of("7") == {}
    assert agent.jobs == {}


def test_restart_keeps_running_jobs_and_frees_those_that_ended(world):
    make, backend, running, clock, tmp = world
    agent = make()
    a = agent.isolate(7, BATCH_STEP, 0, SHARD2)
    b = agent.isolate(8, BATCH_STEP, 0, {**SHARD2, "SLURM_SHARDS_ON_NODE": "1"})
    backend.alloc_memory(a.device_uuid, "7", 1 << 30)
    backend.alloc_memory(b.device_uuid, "8", 1 << 30)
    running.update({7})  # job 8 ended while the agent was down
    clock.t += 60
    restarted = make()
    done = restarted.reconcile(at_start=True)
    assert any("job 8" in d for d in done)
    assert set(restarted.jobs) == {7} and restarted.jobs[7].token == a.token
    (inst,) = backend.list_instances(0)
    assert inst.uuid == a.device_uuid and inst.owner == "7"
    assert final_path(tmp, "node1", 8).exists()


def test_restart_with_slurm_unreachable_frees_nothing(world):
    make, backend, running, clock, _ = world
    agent = make()
    agent.isolate(7, BATCH_STEP, 0, SHARD2)
    clock.t += 60
    restarted = make()
    restarted.list_running_jobs = lambda: None
    restarted.reconcile(at_start=True)
    assert set(restarted.jobs) == {7} and len(backend.list_instances(0)) == 1


def test_orphan_instance_is_adopted_when_its_job_runs_and_destroyed_when_not(world):
    make, backend, running, clock, tmp = world
    backend.create_instance(0, "1g.10gb", 0, owner="11")  # the agent died before saving
    backend.create_instance(0, "1g.10gb", 1, owner="12")
    running.add(11)
    agent = make()
    agent.reconcile(at_start=True)
    assert set(agent.jobs) == {11}
    assert [i.owner for i in backend.list_instances(0)] == ["11"]


def test_corrupt_state_file_is_kept_aside(world):
    make, _, _, _, tmp = world
    (tmp / "agent" / "node1").mkdir(parents=True)
    (tmp / "agent" / "node1" / "state.json").write_text("{not json")
    assert make().jobs == {}
    assert (tmp / "agent" / "node1" / "state.broken").exists()


def test_status_lists_every_mig_instance_with_its_owner(world):
    make, backend, *_ = world
    agent = make()
    a = agent.isolate(7, BATCH_STEP, 1000, SHARD2)
    backend.create_instance(0, "1g.10gb", 0)  # an idle slice laid out for the queue
    status = agent.status()
    assert status["jobs"]["7"]["isolation"] == a.isolation
    listed = {(i["profile"], i["start"], i["owner"]) for i in status["instances"]["0"]}
    assert listed == {(a.profile, a.start, "7"), ("1g.10gb", 0, None)}


def test_a_job_that_ended_while_the_agent_was_down_leaves_a_summary_with_its_gap(world):
    """The summary's `gaps`: the seconds nobody sampled the job (its run is a lower bound)."""
    make, backend, running, clock, tmp = world
    agent = make()
    a = agent.isolate(7, BATCH_STEP, 0, SHARD2)
    b = agent.isolate(8, BATCH_STEP, 0, {**SHARD2, "SLURM_SHARDS_ON_NODE": "1"})
    backend.alloc_memory(a.device_uuid, "7", 1 << 30)
    backend.alloc_memory(b.device_uuid, "8", 1 << 30)
    for _ in range(3):
        clock.t += 1
        agent.tick()
    running.update({7, 8})
    clock.t += 45  # the agent was down 45 s; job 8 ended meanwhile
    running.discard(8)
    restarted = make()
    restarted.tick()
    restarted.reconcile(at_start=True)
    summary = json.loads(final_path(tmp, "node1", 8).read_text())
    assert summary["gaps"] == 45.0 and summary["peak_mem_bytes"] == 1 << 30
    clock.t += 1
    restarted.tick()
    assert restarted.step_end(7, BATCH_STEP)["gaps"] == 45.0  # job 7 ran on, its run has the gap too
    c = restarted.isolate(9, BATCH_STEP, 0, SHARD2)
    for _ in range(3):
        clock.t += 1
        restarted.tick()
    assert restarted.step_end(c.job_id, BATCH_STEP)["gaps"] == 0.0


def test_mps_shares_of_one_gpu_stay_within_one_user(tmp_path):
    """MPS runs one server per user on a GPU: a second user's packed job is refused there (the
    SPANK plugin then fails its step and Slurm requeues it), the same user's is served."""
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB"], mig_enabled=False)
    agent = NodeAgent("node1", tmp_path, backend, isolation_mode="mps")
    agent.isolate(9, BATCH_STEP, 1000, SHARD2)
    assert agent.isolate(10, BATCH_STEP, 1000, SHARD2).isolation == "mps:40"
    with pytest.raises(AgentError, match="MPS servers are per user"):
        agent.isolate(11, BATCH_STEP, 1001, SHARD2)
    agent.step_end(9, BATCH_STEP)
    agent.step_end(10, BATCH_STEP)
    assert agent.isolate(11, BATCH_STEP, 1001, SHARD2).isolation == "mps:40"


# -- issue 33, attack 1: a user chooses the GPU of a packed batch job ------------------------------
def _two_gpu_mps_agent(tmp_path):
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB", "H100-80GB"], mig_enabled=False)
    return NodeAgent("node1", tmp_path, backend, isolation_mode="mps"), backend


def test_a_user_exported_step_gpus_does_not_choose_a_batch_jobs_gpu(tmp_path):
    """Slurm gave GPU 0 (slurmstepd set SLURM_JOB_GPUS=0); another user holds GPU 1 whole; the
    packed job's submitter exported SLURM_STEP_GPUS=1 (and CUDA_VISIBLE_DEVICES=1), which a batch
    step keeps. Before the fix the agent read SLURM_STEP_GPUS first: an MPS share on GPU 1 and GPU
    1 put in EXCLUSIVE_PROCESS under the other user."""
    agent, backend = _two_gpu_mps_agent(tmp_path)
    agent.isolate(5, BATCH_STEP, 2000, {"SLURM_JOB_GPUS": "1"})  # the other user's whole GPU
    forged = {"SLURM_JOB_GPUS": "0", "SLURM_STEP_GPUS": "1", "CUDA_VISIBLE_DEVICES": "1",
              "GPU_DEVICE_ORDINAL": "1", "SLURM_SHARDS_ON_NODE": "2"}
    a = agent.isolate(7, BATCH_STEP, 1000, forged)
    assert a.gpu_index == 0 and a.kind == "mps"
    assert backend.compute_mode(1) == "DEFAULT"
    assert backend.compute_mode(0) == "EXCLUSIVE_PROCESS"


def test_a_packed_job_never_lands_on_a_gpu_another_job_holds_whole(tmp_path):
    """Whatever named the GPU, the one-job-per-whole-GPU, one-user-per-MPS-GPU check covers
    every kind of holder (before: MPS jobs only), for MPS shares and MIG slices alike."""
    agent, backend = _two_gpu_mps_agent(tmp_path)
    agent.isolate(5, BATCH_STEP, 2000, {"SLURM_JOB_GPUS": "1"})
    with pytest.raises(AgentError, match="held whole by job 5"):
        agent.isolate(7, BATCH_STEP, 1000, {"SLURM_JOB_GPUS": "1", "SLURM_SHARDS_ON_NODE": "2"})
    assert backend.compute_mode(1) == "DEFAULT" and 7 not in agent.jobs
    mig_backend = SimGpuBackend(None, "node1", gpus=["H100-80GB", "H100-80GB"])
    mig_agent = NodeAgent("node1", tmp_path / "mig", mig_backend)
    mig_agent.isolate(5, BATCH_STEP, 2000, {"SLURM_JOB_GPUS": "1"})
    with pytest.raises(AgentError, match="held whole by job 5"):
        mig_agent.isolate(7, BATCH_STEP, 1000, {"SLURM_JOB_GPUS": "1", "SLURM_SHARDS_ON_NODE": "2"})


def test_a_packed_grant_that_names_no_gpu_is_refused(tmp_path):
    """Shards but no GPU Slurm named (a CPU-only job that exported SLURM_SHARDS_ON_NODE, or a
    forged SLURM_STEP_GPUS in a batch step): refused, never "OK none" (the step fails to start)."""
    agent, _ = _two_gpu_mps_agent(tmp_path)
    with pytest.raises(AgentError, match="named no GPU"):
        agent.isolate(7, BATCH_STEP, 1000, {"SLURM_STEP_GPUS": "1", "SLURM_SHARDS_ON_NODE": "1"})
    assert agent.jobs == {}
    assert agent.isolate(8, BATCH_STEP, 1000, {}).isolation == "none"  # a CPU-only job: nothing to do


def test_an_srun_step_does_not_move_a_packed_job_to_another_gpu(tmp_path):
    """A later srun step whose SLURM_STEP_GPUS names another GPU does not free the job's share
    and make one there; only a new run (its batch step) moves a packed job."""
    agent, backend = _two_gpu_mps_agent(tmp_path)
    a = agent.isolate(7, BATCH_STEP, 1000, {"SLURM_JOB_GPUS": "0", "SLURM_SHARDS_ON_NODE": "2"})
    with pytest.raises(AgentError, match="runs only on its job's GPU"):
        agent.isolate(7, 0, 1000, {"SLURM_JOB_GPUS": "0", "SLURM_STEP_GPUS": "1", "SLURM_SHARDS_ON_NODE": "2"})
    assert agent.jobs[7].gpu_index == 0 and agent.jobs[7].token == a.token
    assert backend.compute_mode(1) == "DEFAULT"
    assert agent.isolate(7, 0, 1000, {"SLURM_STEP_GPUS": "0", "SLURM_SHARDS_ON_NODE": "2"}).gpu_index == 0


def test_a_step_naming_a_gpu_outside_slurms_record_is_refused(tmp_path):
    """Where slurmstepd leaves the step type's variable to the user (an external launcher's step on
    24.11+ gets the job's environment, not SLURM_STEP_GPUS), the controller's record of the job's
    GPUs on this node, pushed by the helper, decides: a packed step naming another GPU is refused."""
    from slurm_plugin.agent.slurm_jobs import PushedJobs

    pushed = PushedJobs(clock=lambda: 0.0)
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB", "H100-80GB"], mig_enabled=False)
    agent = NodeAgent("node1", tmp_path, backend, isolation_mode="mps", list_running_jobs=pushed)
    pushed.update([7, 8], generation=1, gpus={7: (0,)})
    with pytest.raises(AgentError, match="Slurm's record"):
        agent.isolate(7, 0, 1000, {"SLURM_STEP_GPUS": "1", "SLURM_SHARDS_ON_NODE": "1"})
    assert backend.compute_mode(1) == "DEFAULT" and agent.jobs == {}
    assert agent.isolate(7, 0, 1000, {"SLURM_STEP_GPUS": "0", "SLURM_SHARDS_ON_NODE": "1"}).gpu_index == 0
    # a job the record does not know yet (newer than the last list): the step type's variable decides
    assert agent.isolate(8, 0, 1000, {"SLURM_STEP_GPUS": "0", "SLURM_SHARDS_ON_NODE": "1"}).gpu_index == 0


def test_an_exported_shard_count_does_not_make_a_whole_gpu_job_packed(tmp_path):
    """Slurm leaves SLURM_SHARDS_ON_NODE as the submitter exported it in a job that holds a GPU but no
    shard (PROTECT_ENV): the controller's record of the job's shards on this node decides. Before, the
    agent put such a job's own whole GPU into EXCLUSIVE_PROCESS for an MPS share on the job's word."""
    from slurm_plugin.agent.slurm_jobs import PushedJobs

    pushed = PushedJobs(clock=lambda: 0.0)
    backend = SimGpuBackend(None, "node1", gpus=["H100-80GB", "H100-80GB"], mig_enabled=False)
    agent = NodeAgent("node1", tmp_path, backend, isolation_mode="mps", list_running_jobs=pushed)
    pushed.update([7, 8], generation=1, gpus={7: (0,), 8: (1,)}, shards={7: 0, 8: 2})
    whole = agent.isolate(7, BATCH_STEP, 1000, {"SLURM_JOB_GPUS": "0", "SLURM_SHARDS_ON_NODE": "1"})
    assert whole.kind == "whole" and whole.shards == 0 and backend.compute_mode(0) == "DEFAULT"
    packed = agent.isolate(8, BATCH_STEP, 1000, {"SLURM_JOB_GPUS": "1", "SLURM_SHARDS_ON_NODE": "2"})
    assert packed.kind == "mps" and packed.shards == 2  # Slurm's own count where the record backs it
