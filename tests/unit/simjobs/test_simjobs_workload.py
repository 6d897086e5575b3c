"""The simulated GPU workload: sizes, pair slowdowns, out of memory, reports."""
import io
import os

import pytest

from gpus.sim.backend import SimGpuBackend
from simjobs import pairs
from simjobs.workload import parse_size, run, target_from_env


def test_parse_size():
    assert parse_size("2GiB") == 2 << 30 and parse_size("40MiB") == 40 << 20 and parse_size("512") == 512
    assert parse_size("1.5G") == 3 << 29
    with pytest.raises(ValueError):
        parse_size("2 parsecs")


def test_pair_speeds_come_from_the_traces():
    assert pairs.pair_speed("LSTM", "lstm") == pytest.approx(0.6664, abs=1e-3)
    assert pairs.pair_speed("VGG", "PointNet") == 1.0  # measured > 1 is noise: capped
    assert pairs.pair_speed("Nope", "LSTM") == pairs.DEFAULT_PAIR_SPEED
    assert pairs.packed_speed("LSTM", []) == 1.0
    assert pairs.packed_speed("LSTM", ["LSTM", "Nope"]) == pytest.approx(0.6664 * 0.95, abs=1e-3)
    assert "ResNet18" in pairs.known_workloads()


def _env(backend, device, **extra):
    return {"GPUPACK_SIM_DIR": "/unused", "GPUPACK_NODE": "node1", "GPUPACK_SIM_DEVICE": device,
            "SLURM_JOB_ID": "7", **extra}


def test_runs_and_frees_its_memory():
    gpu = SimGpuBackend(None, "node1", gpus=["H100-80GB"])
    inst = gpu.create_instance(0, "1g.10gb", 0, owner="7")
    out, err = io.StringIO(), io.StringIO()
    rc = run(mem_start=1 << 30, mem_growth=1 << 20, iters=5, iter_ms=1, workload=None,
             env=_env(gpu, inst.uuid), out=out, err=err, backend=gpu)
    assert rc == 0, err.getvalue()
    assert "done 5 iterations" in out.getvalue()
    rec = gpu.memory_of(str(os.getpid()))[inst.uuid]  # a process is known by its pid, as on NVML
    assert gpu.memory_of("7") == {}
    assert rec["current"] == 0 and rec["peak"] == (1 << 30) + 5 * (1 << 20)


def test_growth_can_stop_at_a_peak():
    gpu = SimGpuBackend(None, "node1", gpus=["H100-80GB"])
    inst = gpu.create_instance(0, "1g.10gb", 0, owner="7")
    rc = run(mem_start=1 << 30, mem_growth=1 << 20, grow_iters=3, iters=10, iter_ms=1, workload=None,
             env=_env(gpu, inst.uuid), out=io.StringIO(), err=io.StringIO(), backend=gpu)
    assert rc == 0 and gpu.memory_of(str(os.getpid()))[inst.uuid]["peak"] == (1 << 30) + 3 * (1 << 20)


def test_outgrowing_the_partition_dies_like_cuda():
    gpu = SimGpuBackend(None, "node1", gpus=["H100-80GB"])
    inst = gpu.create_instance(0, "1g.10gb", 0, owner="7")
    err = io.StringIO()
    rc = run(mem_start=9 << 30, mem_growth=200 << 20, iters=50, iter_ms=0, workload=None,
             env=_env(gpu, inst.uuid), out=io.StringIO(), err=err, backend=gpu)
    assert rc == 1
    text = err.getvalue()
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 200.00 MiB. GPU 0 has a total capacity " \
           "of 9.75 GiB" in text and text.startswith("Traceback (most recent call last):")


@pytest.mark.parametrize("framework", ["pytorch", "jax", "tensorflow", "cuda"])
def test_it_dies_as_the_frameworks_process_does_and_tells_the_agent_nothing(monkeypatch, framework):
    from packer.oom_texts import find_oom

    gpu = SimGpuBackend(None, "node1", gpus=["H100-80GB"])
    inst = gpu.create_instance(0, "1g.10gb", 0, owner="7")
    sent, ask, env = _reporting(monkeypatch, gpu, inst)
    err = io.StringIO()
    rc = run(mem_start=5 << 30, mem_growth=10 << 30, grow_iters=1, iters=3, iter_ms=0, workload=None, env=env,
             out=io.StringIO(), err=err, backend=gpu, ask=ask, framework=framework)
    assert rc == 1
    found = find_oom(err.getvalue())
    assert found is not None and found.framework == framework
    assert found.requested_bytes == (None if framework == "cuda" else 10 << 30)
    assert not [b for b in sent if b.get("op") == "alloc_failed"]


def test_with_oom_report_it_tells_the_agent_as_an_observer_would(monkeypatch):
    gpu = SimGpuBackend(None, "node1", gpus=["H100-80GB"])
    inst = gpu.create_instance(0, "1g.10gb", 0, owner="7")
    sent, ask, env = _reporting(monkeypatch, gpu, inst)
    rc = run(mem_start=5 << 30, mem_growth=10 << 30, grow_iters=1, iters=3, iter_ms=0, workload=None, env=env,
             out=io.StringIO(), err=io.StringIO(), backend=gpu, ask=ask, report=False, oom_report=True)
    assert rc == 1
    (failed,) = [b for b in sent if b.get("op") == "alloc_failed"]
    assert failed["asked_bytes"] == 10 << 30 and failed["held_bytes"] == 5 << 30
    with pytest.raises(ValueError):
        run(mem_start=1, mem_growth=0, iters=1, iter_ms=0, workload=None, env=env, framework="caffe")


def test_mps_memory_limit_is_enforced():
    gpu = SimGpuBackend(None, "node1", gpus=["H100-80GB"], mig_enabled=False)
    err = io.StringIO()
    rc = run(mem_start=3 << 30, mem_growth=0, iters=1, iter_ms=0, workload=None,
             env=_env(gpu, gpu.list_gpus()[0].uuid, GPUPACK_MEM_LIMIT_BYTES=str(2 << 30)),
             out=io.StringIO(), err=err, backend=gpu)
    assert rc == 1 and "total capacity of 2.00 GiB" in err.getvalue()


def test_without_the_agents_answer_it_says_what_is_missing():
    err = io.StringIO()
    assert run(mem_start=1, mem_growth=0, iters=1, iter_ms=0, workload=None, env={}, err=err) == 2
    assert "GPUPACK_SIM_DIR" in err.getvalue()
    t = target_from_env({"GPUPACK_SIM_DIR": "/x", "SLURMD_NODENAME": "n1", "CUDA_VISIBLE_DEVICES": "MIG-abc"})
    assert t.device_uuid == "MIG-abc" and t.node == "n1"


def test_a_workload_slows_down_beside_a_neighbour_and_the_gpu_sees_it_less_busy():
    from simjobs.workload import _Engines

    gpu = SimGpuBackend(None, "node1", gpus=["H100-80GB"], mig_enabled=False)
    uuid = gpu.list_gpus()[0].uuid
    senior = _Engines(gpu, uuid, "1", "ResNet18", pairs.DEFAULT_PAIR_SPEED)
    senior.start()
    assert senior.speed() == 1.0
    gpu.start_process(uuid, "2", "LSTM", 77.6)
    senior.checked = -10.0  # look again now
    assert senior.speed() == pytest.approx(pairs.pair_speed("ResNet18", "LSTM"))
    doc = gpu.snapshot()["gpus"][0]["processes"][uuid]["1"]
    assert doc["busy_pct"] == pytest.approx(pairs.workload_util("ResNet18") * pairs.pair_speed("ResNet18", "LSTM"))
    senior.stop()
    assert gpu.neighbours(uuid, "2") == []


def test_a_workload_that_does_not_report_never_calls_the_agent():
    gpu = SimGpuBackend(None, "node1", gpus=["H100-80GB"])
    inst = gpu.create_instance(0, "1g.10gb", 0, owner="7")
    out = io.StringIO()
    rc = run(mem_start=1 << 20, mem_growth=0, iters=3, iter_ms=1, workload="LSTM", report=False,
             env=_env(gpu, inst.uuid, GPUPACK_AGENT_SOCKET="/nonexistent.sock", GPUPACK_REPORT_TOKEN="t"),
             out=out, err=io.StringIO(), backend=gpu)
    assert rc == 0 and "not reporting" in out.getvalue()
    assert gpu.neighbours(inst.uuid, "x") == []  # its process is gone at the end


def _reporting(monkeypatch, gpu, inst):
    sent: list[dict] = []

    def ask(sock, body, timeout):
        sent.append(dict(body))
        return {"status": "ok", "neighbours": []}

    return sent, ask, _env(gpu, inst.uuid, GPUPACK_AGENT_SOCKET="/agent.sock", GPUPACK_REPORT_TOKEN="t")


def test_checkpoints_every_n_iterations_are_printed_and_reported(monkeypatch):
    gpu = SimGpuBackend(None, "node1", gpus=["H100-80GB"])
    inst = gpu.create_instance(0, "1g.10gb", 0, owner="7")
    sent, ask, env = _reporting(monkeypatch, gpu, inst)
    out = io.StringIO()
    rc = run(mem_start=1 << 20, mem_growth=0, iters=6, iter_ms=1, workload=None, env=env, out=out,
             err=io.StringIO(), backend=gpu, report_every_s=60, checkpoint_every=3, ask=ask)
    assert rc == 0
    lines = [x for x in out.getvalue().splitlines() if "checkpoint at" in x]
    assert len(lines) == 2 and "after 3 iterations (every 3 iterations)" in lines[0] and "after 6" in lines[1]
    ckpt = [b for b in sent if b.get("checkpoint")]
    assert [b["iterations"] for b in ckpt] == [3, 6]
    assert all(0.1 <= b["checkpoint_every_s"] < 5 for b in ckpt)  # its measured period, bounded as the agent wants


def test_sigusr1_makes_it_checkpoint_after_the_iteration_it_is_in(monkeypatch):
    import os
    import signal
    import threading

    gpu = SimGpuBackend(None, "node1", gpus=["H100-80GB"])
    inst = gpu.create_instance(0, "1g.10gb", 0, owner="7")
    sent, ask, env = _reporting(monkeypatch, gpu, inst)
    out = io.StringIO()
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1)).start()
    before = signal.getsignal(signal.SIGUSR1)
    rc = run(mem_start=1 << 20, mem_growth=0, iters=20, iter_ms=50, workload=None, env=env, out=out,
             err=io.StringIO(), backend=gpu, report_every_s=60, ask=ask)  # no periodic checkpoints
    assert rc == 0 and signal.getsignal(signal.SIGUSR1) == before  # the handler is put back
    lines = [x for x in out.getvalue().splitlines() if "checkpoint at" in x]
    assert len(lines) == 1 and "on signal USR1" in lines[0], out.getvalue()
    ckpt = [b for b in sent if b.get("checkpoint")]
    assert len(ckpt) == 1 and 3 <= ckpt[0]["iterations"] < 20 and "checkpoint_every_s" not in ckpt[0]
