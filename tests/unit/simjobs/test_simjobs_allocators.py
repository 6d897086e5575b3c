"""The simulated frameworks' allocators: JAX/TensorFlow preallocate unless told not to, PyTorch caches."""
from __future__ import annotations

import io
import os

import pytest

from gpus.sim.backend import SimGpuBackend
from simjobs.allocators import AllocatorError, allocator_for
from simjobs.workload import run

GIB = 1024**3
WHOLE = 81152 * 1024 * 1024  # the H100-80GB's full MIG instance


def test_jax_preallocates_three_quarters_unless_told_not_to():
    assert allocator_for("prealloc", "jax", {}).pool_bytes(80 * GIB) == 60 * GIB
    assert allocator_for("prealloc", "jax", {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"}).pool_bytes(80 * GIB) == 40 * GIB
    assert allocator_for("prealloc", "jax", {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}).kind == "plain"
    assert allocator_for("prealloc", "tensorflow", {}).pool_bytes(80 * GIB) == 80 * GIB
    assert allocator_for("prealloc", "tensorflow", {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}).kind == "plain"
    with pytest.raises(AllocatorError):
        allocator_for("prealloc", "pytorch", {})


def _run(env_extra=None, **kw):
    gpu = SimGpuBackend(None, "node1", gpus=["H100-80GB"])
    device = gpu.create_instance(0, "7g.80gb", 0, owner="7").uuid  # the whole GPU (79.25 GiB)
    env = {"GPUPACK_SIM_DIR": "/unused", "GPUPACK_NODE": "node1", "GPUPACK_SIM_DEVICE": device, "SLURM_JOB_ID": "7",
           **(env_extra or {})}
    out, err = io.StringIO(), io.StringIO()
    rc = run(mem_growth=0, iters=3, iter_ms=0, workload=None, env=env, out=out, err=err, backend=gpu, **kw)
    return rc, gpu.memory_of(str(os.getpid()))[device]["peak"], out.getvalue() + err.getvalue()


def test_a_preallocating_job_holds_its_pool_and_told_not_to_holds_what_it_uses():
    rc, peak, text = _run(mem_start=6 * GIB, framework="jax", allocator="prealloc")
    assert rc == 0 and peak == int(0.75 * WHOLE), text
    rc, peak, text = _run({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, mem_start=6 * GIB, framework="jax",
                          allocator="prealloc")
    assert rc == 0 and peak == 6 * GIB, text


def test_past_its_pool_a_preallocating_job_is_out_of_memory():
    rc, _, text = _run({"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.05"}, mem_start=6 * GIB, framework="jax",
                       allocator="prealloc")
    assert rc == 1 and "RESOURCE_EXHAUSTED" in text, text


def test_a_caching_job_holds_its_reserve_and_gives_it_up_before_failing():
    rc, peak, text = _run(mem_start=4 * GIB, allocator="cache", cache_bytes=30 * GIB)
    assert rc == 0 and peak == 34 * GIB and "4.00 GiB allocated" in text, text
    rc, peak, text = _run(mem_start=60 * GIB, allocator="cache", cache_bytes=30 * GIB)  # 90 GiB do not fit
    assert rc == 0 and peak == 60 * GIB, text


def test_its_reports_carry_the_allocators_peak_only_with_the_probe():
    sent = []

    def ask(path, body, timeout):
        sent.append(body)
        return {"status": "ok"}

    for probe in (True, False):
        sent.clear()
        _run({"GPUPACK_AGENT_SOCKET": "/x", "GPUPACK_REPORT_TOKEN": "t"}, mem_start=4 * GIB, allocator="cache",
             cache_bytes=GIB, probe=probe, ask=ask, report_every_s=0.0)
        peaks = {b.get("alloc_peak_bytes") for b in sent if b["op"] == "report"}
        assert peaks == ({4 * GIB} if probe else {None}), sent
