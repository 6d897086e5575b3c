"""What the watcher keeps per job of a site's queue (issue 36: the helper under 300 MiB at 50,000
queued jobs): job records without a per-instance dict, a listing's memory bounded per job, and
the JSON detail kept only for the jobs that need it (running GPU jobs), never for the queue."""
from __future__ import annotations

import gc
import tracemalloc

from slurm_plugin.helper.queue_read import QueueReader
from slurm_plugin.slurm.fake import FakeSlurm
from slurm_plugin.slurm.model import Job
from slurm_plugin.slurm.runner import SlurmRunner

PENDING, RUNNING = 600, 12
#: what one pending job of a listing may hold, all told (its record, its GRES, its strings);
#: 980 with slotted records, 2,280 with a __dict__ per record (Python 3.11)
BYTES_PER_JOB = 1200


def test_job_records_have_no_per_instance_dict():
    job = Job(job_id=1, name="x", state="PENDING")
    assert not hasattr(job, "__dict__")


def _site_queue() -> tuple[FakeSlurm, SlurmRunner]:
    fake = FakeSlurm("22.05.8")
    for j in range(RUNNING):
        fake.submit(state="RUNNING", nodes=f"node{j % 2 + 1}", gres="gres:gpu:1", gres_detail=[f"gpu:1(IDX:{j % 2})"],
                    time_limit_min=60)
    for j in range(PENDING):
        fake.submit(gres="gres:gpu:1", name=f"gpupack-scale-{j % 50}", time_limit_min=1)
    runner = SlurmRunner(executor=fake)
    runner.version()
    return fake, runner


def test_a_formatted_listing_holds_a_bounded_size_per_job():
    fake, runner = _site_queue()
    reader = QueueReader(lambda: runner)
    first = reader.read()  # the first round: the whole JSON (reconcile), kept so its freeing is not counted
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        read = reader.read()  # formatted
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert first.kind == "json" and read.kind == "formatted" and len(read.jobs) == PENDING + RUNNING
    assert held / len(read.jobs) < BYTES_PER_JOB, f"{held / len(read.jobs):.0f} bytes a job"


def test_json_detail_is_kept_for_the_running_gpu_jobs_only():
    fake, runner = _site_queue()
    reader = QueueReader(lambda: runner)
    for _ in range(3):
        reader.read()
    assert len(reader._details) == RUNNING


def test_freed_memory_is_given_back_after_each_whole_json_listing_only():
    fake, runner = _site_queue()
    reader = QueueReader(lambda: runner, reconcile_s=300.0)
    trims: list[str] = []
    reader.trim = lambda: trims.append("trim")
    kinds = [reader.read().kind for _ in range(3)]
    assert kinds == ["json", "formatted", "formatted"]
    assert trims == ["trim"]  # the running jobs' detail came with the whole listing



def test_a_whole_json_listing_that_fails_costs_no_round():
    """22.05 at 24,000 queued jobs under load: `squeue --json` ran past the watcher's timeout,
    and every round failed. The round reads formatted instead and the whole listing waits (for
    the pending packed jobs' excluded nodes); the running jobs' GPUs are read by id meanwhile."""
    from slurm_plugin.slurm.errors import SlurmCommandError

    fake, _ = _site_queue()
    packed = [fake.submit(gres="gres:shard:2", admin_comment="gpupack: packed shard:2", excluded_nodes="node2")
              for _ in range(3)]
    json_fails = [True]

    def executor(args, env, timeout):
        if "--json" in args and json_fails[0]:
            raise SlurmCommandError(list(args), -1, "did not finish")
        return fake(args, env, timeout)

    runner = SlurmRunner(executor=executor)
    runner.version()
    now = [0.0]
    reader = QueueReader(lambda: runner, reconcile_s=300.0, refresh_s=10.0, monotonic=lambda: now[0])
    first = reader.read()
    assert first.kind == "formatted" and len(first.jobs) == PENDING + RUNNING + len(packed)
    assert len(reader._details) == RUNNING  # the running jobs' GPUs by id; the packed ones wait
    assert sum(1 for a in fake.calls if a[:3] == ["scontrol", "-d", "show"]) == RUNNING
    now[0] = 5.0
    assert reader.read().kind == "formatted"  # neither listing tried again so soon
    calls = len(fake.calls)
    now[0] = 11.0
    reader.read()  # the wait doubled to 20 s after the failure
    assert not any("--json" in a for a in fake.calls[calls:])
    now[0] = 21.0
    assert reader.read().kind == "formatted" and len(reader._details) == RUNNING  # tried, failed again: 40 s
    calls = len(fake.calls)
    now[0] = 45.0
    reader.read()
    assert not any("--json" in a for a in fake.calls[calls:])
    json_fails[0] = False
    now[0] = 61.5
    assert reader.read().kind == "formatted" and len(reader._details) == RUNNING + len(packed)  # 40 s after
    fake.submit(gres="gres:shard:2", admin_comment="gpupack: packed shard:2")
    now[0] = 72.0
    reader.read()
    assert len(reader._details) == RUNNING + len(packed) + 1  # a success brought the wait back to refresh_s
    now[0] = 301.0
    assert reader.read().kind == "json"  # the reconcile a queue_reconcile_s after the failed one
