"""Trace-driven cluster simulator: what packing gains, against the baselines.

Adapter-side: it drives the pure cores (``packer``, ``mig``, ``predictor``) on a simulated
cluster. Entry points: :func:`run_policy` (load, simulate, summarise) and
:func:`simulator.report.compare`.
"""
from __future__ import annotations

from pathlib import Path

from simulator.config import BASELINES, POLICIES, SimConfig
from simulator.engine import Simulator, simulate
from simulator.metrics import summary, write_jobs_csv
from simulator.result import SimResult
from simulator.rows import LoadReport
from simulator.traces import trace_from_spec
from simulator.workload import (PairTable, SimJobSpec, TraceJob, WorkloadError,
                                             WorkloadProfile, build_jobs, load_profiles,
                                             own_profiles)

__all__ = [
    "BASELINES", "LoadReport", "POLICIES", "PairTable", "SimConfig", "SimJobSpec", "SimResult", "Simulator",
    "TraceJob", "WorkloadError", "WorkloadProfile", "build_jobs", "load_profiles",
    "load_workload", "run_policy", "simulate", "summary", "trace_from_spec", "write_jobs_csv",
]


def load_workload(trace: str = "philly", data_dir: str | Path | None = None, seed: int = 0,
                  jobs: int | None = None, time_scale: float = 1.0,
                  growing_fraction: float = 0.1, gpu_memory_bytes: int = 80 << 30, *,
                  truth: str | Path | None = None, timezone: str | None = None,
                  bad_rows: str = "refuse", report: LoadReport | None = None, jump_fraction: float = 0.0):
    """(job specs, profiles, pair table) for a trace spec (``philly`` or ``sacct:FILE``).

    ``truth``: the pair table the replay slows packed jobs by (default: the measured pairs
    of ``data_dir``); ``timezone``: the zone of timestamps without one (default UTC);
    ``bad_rows``: refuse or skip (and count) bad rows; ``report``: filled with what the
    load kept and skipped (:class:`LoadReport`); ``jump_fraction``: growing jobs whose memory
    jumps in one step (``build_jobs``)."""
    d = Path(data_dir) if data_dir else None
    profiles, pairs = load_profiles(d, truth)
    tr = trace_from_spec(trace, d, report=report, timezone=timezone, bad_rows=bad_rows)
    profiles, pairs, own = own_profiles(tr[:jobs] if jobs else tr, profiles, pairs)
    specs = build_jobs(tr, profiles, seed=seed, jobs=jobs, time_scale=time_scale,
                       growing_fraction=growing_fraction, gpu_memory_bytes=gpu_memory_bytes,
                       own=own, jump_fraction=jump_fraction)
    return specs, profiles, pairs


def run_policy(cfg: SimConfig, specs, profiles, pairs) -> tuple[dict, SimResult]:
    res = simulate(cfg, specs, profiles, pairs)
    return summary(res), res
