"""What a job leaves behind when it ends: its summary (the final file), its memory records."""
from __future__ import annotations

from slurm_plugin.agent.state import Assignment


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
        "gaps": round(a.gap_s, 1),  # seconds without samples: a run with gaps is a lower bound
    }


def free_memory_of(backend, owner: str) -> None:
    """The owner's processes are gone: the (simulated) driver gets its memory back.

    Only a backend that keeps memory records per owner (the simulated GPU) has any."""
    mem_of = getattr(backend, "memory_of", None)
    if mem_of is None:
        return
    for dev in mem_of(owner):
        backend.free_memory(dev, owner)
