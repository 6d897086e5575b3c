"""Issue 34 items 3 and 4 on the real cluster: sizes from what a job needs, and dispatch both ways.

- A JAX-like job that preallocates 75 % of its GPU unless told not to is profiled at its real
  use (the agent's framework settings reach its step through the SPANK plugin) and packed on
  its next run; the same job whose user set ``XLA_PYTHON_CLIENT_PREALLOCATE=true`` keeps it.
- A PyTorch-like job whose caching allocator reserves far more than it allocates, and reports
  its allocated peak as `TorchProbe.report` does, is sized on that need and packed next run.
- A job that holds a GPU and never touches it is history (0 bytes) and packed next run at the
  smallest share.
- A job made exclusive at submit because a GPU was idle then is packed at its turn once none is
  (23.02+); on 22.05, where Slurm refuses the change, the helper says so and the job waits.

Uses the session fixture `cluster` (3 nodes x 2 simulated H100-80GB, 5 shares a GPU, enforce).
"""
from __future__ import annotations

import json
import re

import pytest
from e2e_support import RUN, SLEEP, events, simgpu_script, wait_for, within_rounds
from test_dispatch_live import _seed
from test_history_live import DONE, packing, record_of, runs_of  # noqa: F401 (packing: a fixture)

from store.db import RunRecord

pytestmark = pytest.mark.integration
GIB = 1024**3


def output(cluster, job_id: int) -> str:
    """The job's output, for a failure's message."""
    try:
        return open(cluster.job(job_id)["StdOut"], encoding="utf-8", errors="replace").read()[-2000:]
    except (OSError, KeyError) as exc:
        return f"(no output: {exc})"


def one_run(cluster, job_id: int, what: str) -> RunRecord:
    (run,) = wait_for(lambda: runs_of(cluster, job_id), 60, f"the {what} run in the controller's store")
    return run


def test_preallocating_caching_and_untouched_jobs_are_profiled_at_their_need_and_packed(packing):
    cluster = packing
    jax = simgpu_script("--framework jax --allocator prealloc --mem-start 6GiB --iters 60 --iter-ms 50",
                        tag="sizes-jax")
    torch = simgpu_script("--allocator cache --cache 30GiB --mem-start 4GiB --probe --iters 60 --iter-ms 50",
                          tag="sizes-torch")
    idle = f"#!/bin/sh\n: 'sizes-idle {RUN}'\nsleep 8\n".encode()
    jobs = {
        "jax": (["--gres=gpu:1", "-J", "sizes-jax"], jax),
        "torch": (["--gres=gpu:1", "-J", "sizes-torch"], torch),
        "idle": (["--gres=gpu:1", "-J", "sizes-idle"], idle),
    }
    first = {k: cluster.submit(args, body) for k, (args, body) in jobs.items()}
    # the same JAX job whose user asked for preallocation: the suite's setting does not override it
    own = cluster.submit(["--gres=gpu:1", "-J", "sizes-jax-own", "--export=ALL,XLA_PYTHON_CLIENT_PREALLOCATE=true"],
                         jax)
    for key, job in (*first.items(), ("own", own)):
        assert cluster.wait(job, DONE, 120) == "COMPLETED", (key, output(cluster, job))
        assert record_of(cluster, job).verdict == "exclusive"  # no history: profiled on a whole GPU

    jax_run = one_run(cluster, first["jax"], "JAX-like")
    assert 6 * GIB <= jax_run.peak_mem_bytes < 7 * GIB, jax_run  # not 75 % of 80 GiB
    own_run = one_run(cluster, own, "preallocating")
    assert own_run.peak_mem_bytes >= 0.75 * 79 * GIB, own_run  # the user's own setting stood
    torch_run = one_run(cluster, first["torch"], "caching")
    assert torch_run.peak_mem_bytes >= 34 * GIB, torch_run  # NVML sees the reserve ...
    assert torch_run.need_bytes is not None and 4 * GIB <= torch_run.need_bytes <= 5 * GIB, torch_run  # ... need apart
    idle_run = one_run(cluster, first["idle"], "untouched")
    assert (idle_run.untouched, idle_run.peak_mem_bytes, idle_run.lower_bound, idle_run.mean_util_pct) == (
        True, 0, False, 0.0), idle_run

    # one after the other: submitted together, one may be judged beside the others and kept whole
    # for the pair's predicted speed (`below-min-speed`, seen on 24.11), which is not what this tests
    second = {}
    for key, (args, body) in jobs.items():
        second[key] = job = cluster.submit(args, body)
        assert cluster.wait(job, DONE, 120) == "COMPLETED", (key, output(cluster, job))
    for key, job in second.items():
        record = record_of(cluster, job)
        # each fits the smallest share (16 GiB of an 80 GiB H100 cut in 5): need + headroom
        assert (record.verdict, record.shards, record.fields.get("src")) == ("packed", 1, "history(1)"), (key, record)
    assert runs_of(cluster, second["jax"])[0].peak_mem_bytes < 7 * GIB  # on its slice too, what it uses


def _view(cluster) -> dict:
    return json.loads((cluster.spec.helper_socket.parent / "cluster-view.json").read_text())


def _idle_in_view(cluster) -> int | None:
    """Idle whole GPUs as the submit path counts them in the watcher's view (pending whole-GPU
    jobs take theirs first)."""
    from slurm_plugin.helper.cluster_view import idle_gpus
    from slurm_plugin.helper.view_file import snapshot_from_doc

    try:
        return idle_gpus(snapshot_from_doc(_view(cluster)))
    except (OSError, ValueError, KeyError):
        return None


def test_a_job_made_exclusive_because_a_gpu_was_idle_is_packed_at_its_turn(idle_cluster):
    cluster = idle_cluster
    body = b"#!/bin/sh\n# gpupack test pack at dispatch\nsleep 300\n"
    name = f"dispatch-pack-{RUN}"
    fp = _seed(cluster, name, body)  # 7.6 GiB: one share of an H100 cut in 5
    # every GPU busy but node1's second
    fillers = [cluster.submit(["-J", "dp-fill", "-w", "node1", "--gres=shard:5"], SLEEP)]
    fillers += [cluster.submit(["-J", "dp-fill", "-w", n, "--gres=gpu:2"], SLEEP) for n in ("node2", "node3")]
    for job in fillers:
        cluster.wait(job, "RUNNING", 30)
    wait_for(lambda: _idle_in_view(cluster) == 1, 45, "the cluster view shows one GPU idle",
             explain=lambda: json.dumps(_view(cluster)))

    job = cluster.submit(["-J", name, "--begin=now+120", "--gres=gpu:1"], body)
    record = record_of(cluster, job)
    assert (record.verdict, record.reason, record.fingerprint) == ("exclusive", "idle-gpu", fp), record

    late = cluster.submit(["-J", "dp-late", "-w", "node1", "--gres=shard:1"], SLEEP)  # takes the idle GPU
    cluster.wait(late, "RUNNING", 30)
    if cluster.release[:2] >= (23, 2):
        packed = within_rounds(cluster, lambda: (r := record_of(cluster, job)).verdict == "packed" and r,
                               "the job's record says it was packed at dispatch", after_s=5)
        assert (packed.reason, packed.shards, packed.fingerprint) == ("packed-at-dispatch", 1, fp), packed
        assert cluster.job(job)["TresPerNode"] == cluster.tres("shard:1")
        (event,) = wait_for(lambda: events(cluster, "pack-at-dispatch", job), 10, "a pack-at-dispatch event")
        assert "no whole GPU idle" in event.detail and not event.data.get("shadow"), event
        cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
        cluster.wait(job, "RUNNING", 30)
        assert cluster.job(job)["NodeList"] == "node1"  # on the shares left beside dp-late
    else:  # 22.05 refuses to change a pending gpu job into shards: said once, and the job waits whole
        (event,) = within_rounds(cluster, lambda: events(cluster, "pack-at-dispatch-unsupported", job),
                                 "a pack-at-dispatch-unsupported event", after_s=5)
        assert "cannot change a pending job's gpu request into shards" in event.detail, event
        refused = cluster.run("scontrol", "update", f"JobId={job}", "Gres=shard:1", check=False)
        assert refused.returncode != 0, refused  # what the helper would have met
        assert cluster.job(job)["TresPerNode"] == cluster.tres("gpu:1")
        assert record_of(cluster, job).verdict == "exclusive"


def test_an_unknown_job_packed_on_the_shipped_guess_that_runs_out_is_retried_on_what_it_needed(packing, tmp_path):
    """etc/gpupack.toml ships `pack_unknown = true` (chosen in the replay, docs/simulator.md):
    a job with no history is packed on `unknown_estimate_gib` (8 GiB: one share, a 10 GiB
    slice). This one needs 15 GiB: its allocation fails in the slice, PyTorch's text is read
    from its output, and it is retried once on two shares (what it held plus what it asked
    for), where it completes: the wrong guess is contained, live."""
    cluster = packing
    cluster.set_option("pack_unknown", "true")
    out = tmp_path / "unknown.out"
    body = simgpu_script("--framework pytorch --mem-start 5GiB --mem-growth 10GiB --grow-after 40 --grow-iters 41 "
                         "--iters 120 --iter-ms 50", tag="sizes-unknown")
    job = cluster.submit(["--gres=gpu:1", "-J", "sizes-unknown", "-o", str(out)], body)
    record = record_of(cluster, job)
    assert (record.verdict, record.shards) == ("packed", 1), record
    assert (record.fields.get("src") or "").startswith("default"), record  # no history: the guess
    assert cluster.wait(job, DONE, 180) == "COMPLETED", output(cluster, job)
    restarts = events(cluster, "restart-oom", job)
    assert len(restarts) == 1, restarts
    data = restarts[0].data
    # two shares (the shim names the shares' type where the job's GPU had one: shard:h100:2)
    assert data["from_shards"] == 1 and re.fullmatch(r"(gres[:/])?shard(:\w+)?:2", data["to"]), data
    assert data["evidence_kind"] == "reported" and (data["seen_in"] or "").startswith("output:pytorch:"), data
    info = cluster.job(job)
    assert int(info["Restarts"]) >= 1 and re.fullmatch(r"gres[:/]shard(:\w+)?:2", info["TresPerNode"]), info
