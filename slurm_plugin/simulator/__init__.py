"""Trace-driven cluster simulator: what packing gains, against the baselines.

Adapter-side: it drives the pure cores (``packer``, ``mig``, ``predictor``) on a simulated
cluster. Entry points: :func:`run_policy` (load, simulate, summarise) and
:func:`slurm_plugin.simulator.report.compare`.
"""
from __future__ import annotations

from pathlib import Path

from slurm_plugin.simulator.config import BASELINES, POLICIES, SimConfig
from slurm_plugin.simulator.engine import Simulator, simulate
from slurm_plugin.simulator.metrics import summary, write_jobs_csv
from slurm_plugin.simulator.result import SimResult
from slurm_plugin.simulator.workload import (PairTable, SimJobSpec, TraceJob, WorkloadError,
                                             WorkloadProfile, build_jobs, load_profiles,
                                             own_profiles, trace_from_spec)

__all__ = [
    "BASELINES", "POLICIES", "PairTable", "SimConfig", "SimJobSpec", "SimResult", "Simulator",
    "TraceJob", "WorkloadError", "WorkloadProfile", "build_jobs", "load_profiles",
    "load_workload", "run_policy", "simulate", "summary", "trace_from_spec", "write_jobs_csv",
]


def load_workload(trace: str = "philly", data_dir: str | Path | None = None, seed: int = 0,
                  jobs: int | None = None, time_scale: float = 1.0,
                  growing_fraction: float = 0.1, gpu_memory_bytes: int = 80 << 30):
    """(job specs, profiles, pair table) for a trace spec (``philly`` or ``sacct:FILE``)."""
    d = Path(data_dir) if data_dir else None
    profiles, pairs = load_profiles(d)
    tr = trace_from_spec(trace, d)
    profiles, pairs, own = own_profiles(tr[:jobs] if jobs else tr, profiles, pairs)
    specs = build_jobs(tr, profiles, seed=seed, jobs=jobs, time_scale=time_scale,
                       growing_fraction=growing_fraction, gpu_memory_bytes=gpu_memory_bytes,
                       own=own)
    return specs, profiles, pairs


def run_policy(cfg: SimConfig, specs, profiles, pairs) -> tuple[dict, SimResult]:
    res = simulate(cfg, specs, profiles, pairs)
    return summary(res), res
