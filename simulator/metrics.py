"""What a run gives: the summary an admin compares, and each job's numbers.

- JCT: end minus submit. Queueing delay: first start minus submit.
- Slowdown versus alone: time from first start to end over the job's duration alone
  (restarts included); ``run_slowdown_max`` is its maximum over jobs.
- ``gpu_alloc``: the time-averaged share of GPUs holding at least one job (Slurm's view).
  ``gpu_util``: the time-averaged GPU compute utilisation, each GPU counting
  ``min(1, sum of util x speed)`` of the jobs on it (utilisation as measured alone).
  ``gpu_mem_util``: the time-averaged share of GPU memory in use.
- ``pair_bound_ok``: every job that shared a GPU ran no slower than its worst measured pair
  allows (its shared-run slowdown <= 1 / lowest measured pair speed, within 1e-6);
  ``pair_bound_worst`` is the largest ratio of that slowdown to that bound (<= 1 when it
  holds; jobs restarted, in unmeasured pairs or held at speed 0 beside a pair that cannot
  run together are not judged);
  ``jobs_in_unmeasured_pairs`` counts jobs that shared with a pair the data does not cover
  (their speed is the documented fallback).
- ``lost_gpu_s``: work lost to restarts (out-of-memory, early restarts, contention
  requeues, grow evictions, regroup moves, pairs that cannot run together), in seconds of
  the jobs' runs; ``lost_gpu_h`` the same in GPU-hours. ``jobs_failed``: jobs with an
  attempt that failed (out of memory, or beside a pair that cannot run together:
  ``pair_failures`` counts those attempts); ``jobs_restarted``: jobs restarted at least once
  for any reason. ``p50_slowdown``/``p95_slowdown``: per-job slowdown percentiles.
- ``multi_gpu_avg_queue_s``: the average queueing delay (submit to first start) of the
  multi-GPU jobs, the jobs that wait at the head for whole GPUs.
- The grow and regroup actions (zero when switched off): ``grow_preemptions`` (younger packed jobs
  evicted for a growing neighbour), ``grow_restarts_in_place``, ``grow_declined`` (growers
  sent through the queue), ``grow_lost_work_s`` (what the evicted lost);
  ``regroup_plans``, ``regroup_moves``, ``regroup_lost_work_s`` (work lost since the
  checkpoint plus requeue and restart time of the moved jobs; the part since the
  checkpoint alone is ``regroup_lost_since_checkpoint_s``), ``regroup_head_gain_s`` (the
  heads' earlier starts the planner counted on), ``regroup_planner_calls``.
- Memory warnings (``--predictor on``): ``memory_warnings_restarted`` (restarted or grown
  in place) and ``memory_warnings_kept`` (kept running: ``SuiteRules.restart`` priced a
  restart above the OOM's risk, the live helper's ``keep-memory``).
- Out-of-memory (``packer.oom_restart``, the live OOM watch's code; docs/oom-restart.md):
  ``oom_jobs_retried`` (jobs requeued bigger after running out of memory in their share),
  ``oom_jobs_left_failed`` (retries spent: they end FAILED, counted in neither ``jobs`` nor
  ``jobs_unfinished``), ``oom_lost_work_s`` (the work their out-of-memory attempts lost).
- ``rules``: the decision settings the run used (``packer.rules.SuiteRules.settings``: the
  defaults, or a site's gpupack.toml with ``--config``, flags overriding).
- Pair prediction (colocate with ``pair_predict``): ``pred_mae``/``pred_bias`` of the speeds
  predicted for each watched pack against the truth (``pred_unseen_*``: pairs not yet
  observed when packed); ``model_mae_all_measured``: the feature model at the end of the
  run over every measured pair; ``pairs_observed``.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

from simulator.result import SimResult
from simulator.workload import percentile


# grow and regroup actions (``simulator.growth``, ``.regrouping``): 0 when switched off
ACTION_KEYS = {"grow_preemptions": 0, "grow_restarts_in_place": 0, "grow_declined": 0,
               "grow_lost_work_s": 0.0, "regroup_plans": 0, "regroup_moves": 0,
               "regroup_lost_work_s": 0.0, "regroup_lost_since_checkpoint_s": 0.0,
               "regroup_head_gain_s": 0.0, "regroup_planner_calls": 0}


def summary(res: SimResult) -> dict:
    done = [j for j in res.jobs if j.end is not None and not j.oom_failed]
    jct = [j.end - j.submit for j in done]
    wait = [j.first_start - j.submit for j in done]
    slow = [(j.end - j.first_start) / j.duration for j in done]
    shared = [j for j in done if j.shared_with]
    # A shared job with no restart: its run time over its duration is bounded by the
    # worst pair it was in; restarts add lost work, which the bound does not cover.
    clean = [j for j in shared if not (j.oom_restarts or j.pred_restarts or j.preemptions or j.moves
                                       or j.pair_failures or j.min_rate <= 0.0)]
    judged = [((j.end - j.first_start) / j.duration) / j.max_pair_slow
              for j in clean if not j.unmeasured]
    over = [r for r in judged if r > 1.0 + 1e-6]
    span = res.makespan or 1.0
    multi = [j.first_start - j.submit for j in done if j.gpus > 1]
    one = [j for j in done if j.gpus == 1]
    n_gpus = res.config.gpus
    return finite({
        "policy": res.policy,
        "predictor": "on" if res.predictor else "off",
        "grow_preempt": "on" if res.config.grow_preempt else "off",
        "regroup": "on" if res.config.regroup else "off",
        "label": res.config.label,
        "gpus": n_gpus,
        "gpu_model": res.config.gpu_model,
        "jobs": len(done),
        "jobs_unfinished": sum(1 for j in res.jobs if j.end is None),
        "jobs_skipped": res.skipped,
        "jobs_with_own_figures": sum(1 for j in res.jobs if j.spec.own),
        "makespan_s": round(res.makespan, 1),
        "avg_jct_s": round(sum(jct) / len(jct), 1) if jct else 0.0,
        "p95_jct_s": round(percentile(jct, 95), 1),
        "avg_queue_s": round(sum(wait) / len(wait), 1) if wait else 0.0,
        "p95_queue_s": round(percentile(wait, 95), 1),
        "gpu_util": round(res.util_area / (n_gpus * span), 4),
        "gpu_alloc": round(res.busy_area / (n_gpus * span), 4),
        "gpu_mem_util": round(res.mem_area / (res.mem_total * span), 4),
        "jobs_preempted": sum(1 for j in done if j.preemptions),
        "preemptions": sum(j.preemptions for j in res.jobs),
        "oom_restarts": sum(j.oom_restarts for j in res.jobs),
        "predictive_restarts": sum(j.pred_restarts for j in res.jobs),
        "lost_gpu_s": round(sum(j.lost_work for j in res.jobs), 1),
        "jobs_failed": sum(1 for j in res.jobs if j.oom_restarts or j.pair_failures),
        "jobs_restarted": sum(1 for j in res.jobs if j.oom_restarts or j.pair_failures
                              or j.pred_restarts or j.preemptions or j.moves),
        "mig_reconfigurations": res.reconfig_creates + res.reconfig_destroys,
        "mig_creates": res.reconfig_creates,
        "mig_destroys": res.reconfig_destroys,
        "jobs_shared": len(shared),
        "one_gpu_jobs": len(one),
        "one_gpu_shared_fraction": round(sum(1 for j in one if j.shared_with) / len(one), 4) if one else 0.0,
        "jobs_in_unmeasured_pairs": sum(1 for j in shared if j.unmeasured),
        "avoided_pairs": res.avoided_pairs,
        "avg_slowdown": round(sum(slow) / len(slow), 4) if slow else 0.0,
        "p50_slowdown": round(percentile(slow, 50), 4),
        "p95_slowdown": round(percentile(slow, 95), 4),
        "run_slowdown_max": round(max(slow), 4) if slow else 0.0,
        "pair_bound_ok": not over,
        "pair_bound_worst": round(max(judged), 4) if judged else 0.0,
        "pair_bound_jobs": len(judged),
        "lost_gpu_h": round(sum(j.lost_work * j.gpus for j in res.jobs) / 3600, 1),
        "multi_gpu_jobs": len(multi),
        "multi_gpu_avg_queue_s": round(sum(multi) / len(multi), 1) if multi else 0.0,
        **ACTION_KEYS, **res.actions,
        "pair_knowledge": res.config.pair_knowledge,
        **res.knowledge,
        "sim_events": res.events,
        "sim_wall_s": round(res.wall_s, 2),
        "sim_passes": res.passes,
        "sim_passes_skipped": res.passes_skipped,
        "rules": res.rules,
    })


def finite(summ: dict) -> dict:
    """``summ`` itself; ValueError naming every figure that is infinite or NaN (the trace
    loaders bound their inputs so that none is: a library caller's job specs may not)."""
    bad = {k: v for k, v in summ.items() if isinstance(v, float) and not math.isfinite(v)}
    if bad:
        raise ValueError(f"the replay gave figures that are not finite: {bad}; a job's "
                         f"duration or submit time is beyond what a trace may hold "
                         f"(docs/simulator.md, Trace formats)")
    return summ


def with_load(summ: dict, report) -> dict:
    """The run's summary with what the trace load left out (a ``LoadReport``): ``skipped``
    by reason (jobs with more GPUs than the cluster among them), ``jobs_skipped`` their
    total, ``jobs_never_ran`` (never started in the trace, or never in the replay) and the
    load's own figures under ``trace_load``."""
    skipped = {"more GPUs than the cluster": summ["jobs_skipped"]} if summ["jobs_skipped"] else {}
    skipped.update(sorted(report.skipped.items()))
    return {**summ, "jobs_skipped": sum(skipped.values()), "skipped": skipped,
            "jobs_never_ran": report.never_ran + summ["jobs_unfinished"],
            "trace_load": report.as_dict()}


JOB_COLUMNS = ("id", "submit", "gpus", "workload", "duration", "first_start", "end", "jct",
               "queue", "slowdown", "min_speed", "shared", "unmeasured_pair", "preemptions",
               "oom_restarts", "predictive_restarts", "pair_failures", "lost_s")


def job_rows(res: SimResult):
    for j in res.jobs:
        end = j.end
        yield {
            "id": j.id, "submit": round(j.submit, 1), "gpus": j.gpus, "workload": j.workload,
            "duration": j.duration,
            "first_start": None if j.first_start is None else round(j.first_start, 1),
            "end": None if end is None else round(end, 1),
            "jct": None if end is None else round(end - j.submit, 1),
            "queue": None if j.first_start is None else round(j.first_start - j.submit, 1),
            "slowdown": None if end is None else round((end - j.first_start) / j.duration, 4),
            "min_speed": round(j.min_rate, 4), "shared": int(bool(j.shared_with)),
            "unmeasured_pair": int(j.unmeasured), "preemptions": j.preemptions,
            "oom_restarts": j.oom_restarts, "predictive_restarts": j.pred_restarts,
            "pair_failures": j.pair_failures,
            "lost_s": round(j.lost_work, 1),
        }


def write_jobs_csv(res: SimResult, path: str | Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=JOB_COLUMNS)
        w.writeheader()
        w.writerows(job_rows(res))
