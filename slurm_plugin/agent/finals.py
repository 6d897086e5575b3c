"""What a job leaves behind when it ends: its summary (the final file), its memory records."""
from __future__ import annotations

import json
import logging
from pathlib import Path

from slurm_plugin.agent.sampler import GAP_AFTER_S
from slurm_plugin.agent.state import Assignment, write_json_atomic

log = logging.getLogger(__name__)


def job_summary(a: Assignment, node: str, ended_at: float, reason: str) -> dict:
    """The job's final summary: what it held, what it reported and what was sampled of it."""
    return {
        "job_id": a.job_id, "node": node, "gpu_index": a.gpu_index,
        "isolation": a.isolation, "shards": a.shards, "workload": a.workload,
        "peak_mem_bytes": a.peak_mem_bytes,
        "mean_util_pct": a.util_sum / a.util_n if a.util_n else None,
        "mean_throughput": a.throughput_sum / a.throughput_n if a.throughput_n else None,
        "iterations": a.iterations, "samples": a.samples,
        "started_at": a.started_at, "ended_at": ended_at, "end_reason": reason,
        "rejected_reports": a.rejected_reports,
        "gaps": round(a.gap_s, 3),  # seconds without samples: a run with gaps is a lower bound
        "alloc_peak_bytes": a.alloc_peak_bytes,  # what its allocator said it allocated at most (None: silent)
        "covered": covered(a, ended_at),
        "run": run_key(a),
    }


def covered(a: Assignment, ended_at: float) -> bool:
    """Whether the job's GPU was sampled from the run's start to its end: its first sample
    within a gap's length of its start and its last within one of its end (the stretches
    between are `gap_s`). A run that shows no memory is untouched only when this holds."""
    start = a.started_at if a.started_at is not None else a.created_at
    return (a.gpu_index >= 0 and a.samples >= 2 and a.first_sampled_at is not None
            and a.last_sampled_at is not None and a.first_sampled_at - start <= GAP_AFTER_S
            and ended_at - a.last_sampled_at <= GAP_AFTER_S)


def run_key(a: Assignment) -> str:
    """One run of a job on this node: its id and when the agent isolated it (a requeued job
    that comes back is another run)."""
    return f"{a.job_id}.{int(a.created_at * 1000)}"


def free_memory_of(backend, owner: str) -> None:
    """The owner's processes are gone: the (simulated) driver gets its memory back.

    Only a backend that keeps memory records per owner (the simulated GPU) has any."""
    mem_of = getattr(backend, "memory_of", None)
    if mem_of is None:
        return
    for dev in mem_of(owner):
        backend.free_memory(dev, owner)


class KeptFinals:
    """Finished runs' summaries, kept on the node until the helper acknowledges them (one JSON
    file per run, so an agent restart loses none)."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    def put(self, summary: dict) -> None:
        write_json_atomic(self.directory / f"{summary['run']}.json", summary)

    def pending(self) -> list[dict]:
        out = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError) as exc:
                log.warning("unreadable kept final %s (%s): left for a look", path, exc)
        return out

    def ack(self, keys: list) -> int:
        """Forget the runs named by ``keys``: a run key ("job.ms"), or a job id for every kept run
        of that job. Acknowledging what is gone already is no error (the helper may retry)."""
        jobs = {int(k) for k in keys if isinstance(k, int) and not isinstance(k, bool)}
        runs = {k for k in keys if isinstance(k, str)}
        gone = 0
        for path in self.directory.glob("*.json"):
            run = path.stem
            if run in runs or int(run.split(".", 1)[0]) in jobs:
                path.unlink(missing_ok=True)
                gone += 1
        return gone
