"""`gpupack simulate`: replay a job trace on a simulated cluster under a packing policy.

Thin: loads the workload, calls :mod:`simulator`, prints. Library errors
become one ``Error:`` line.
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import sys

from pathlib import Path

import click

from slurm_plugin.cli.simulate_base import CONTEXT_SETTINGS, library_errors
from slurm_plugin.cli.simulate_stress import stress_pairs

log = logging.getLogger(__name__)

POLICY_NAMES = ("exclusive", "shard-fixed", "mig-static", "lucid-like", "colocate",
                "mig-by-size", "mig-in-order")

SHIPPED, LEGACY = "shipped", "replay-legacy"  # simulator.settings.SETTINGS (not imported here: kept light)
SETTINGS = (SHIPPED, LEGACY)

TABLE_KEYS = ("policy", "predictor", "jobs", "makespan_s", "avg_jct_s", "p95_jct_s",
              "avg_queue_s", "p95_queue_s", "gpu_util", "gpu_mem_util", "jobs_preempted",
              "oom_restarts", "predictive_restarts", "mig_reconfigurations", "p95_slowdown",
              "run_slowdown_max", "pair_bound_ok", "pair_bound_worst")


def _trace_options() -> list:
    """The trace replayed and the cluster it runs on."""
    return [
        click.option("--trace", default="philly", show_default=True, metavar="SPEC",
                     help="philly (shared/data), philly:FILE.csv, or sacct:FILE (a `sacct -P` "
                          "export with Submit, Elapsed or Start/End, AllocTRES; see docs)."),
        click.option("--gpus", type=click.IntRange(min=1), default=1000, show_default=True,
                     help="GPUs in the simulated cluster."),
        click.option("--gpu-model", default="A100-80GB", show_default=True, metavar="MODEL",
                     help="GPU model (its MIG catalogue and memory; see `gpupack mig catalog`)."),
        click.option("--jobs", "n_jobs", type=click.IntRange(min=1), default=None,
                     help="Keep only the first N jobs of the trace (by submit time)."),
        click.option("--time-scale", type=float, default=1.0, show_default=True,
                     help="Multiply submit times by this (0.5 doubles the arrival rate; above 0, at "
                          "most 1000)."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Seed of the profile draw (same seed, same workload)."),
    ]


def _failure_options() -> list:
    """How the replayed jobs outgrow their memory and how their out-of-memory ends are seen."""
    return [
        click.option("--growing-fraction", type=click.FloatRange(0, 1), default=0.1,
                     show_default=True,
                     help="Share of one-GPU jobs whose memory grows past their estimate."),
        click.option("--jump-fraction", type=click.FloatRange(0, 1), default=0.0, show_default=True,
                     expose_value=False, callback=lambda ctx, _p, v: ctx.meta.__setitem__("jump_fraction", v),
                     help="Share of the growing jobs whose memory jumps in one step (contained in "
                          "its share, requeued bigger: restart-oom) instead of rising linearly."),
        click.option("--oom-output-share", type=click.FloatRange(0, 1), default=0.0, show_default=True,
                     expose_value=False, callback=lambda ctx, _p, v: ctx.meta.__setitem__("oom_output_share", v),
                     help="Share of one-GPU jobs whose out-of-memory end is seen only through their "
                          "output (a framework's text; retried on the job's word)."),
        click.option("--oom-unseen-share", type=click.FloatRange(0, 1), default=0.0, show_default=True,
                     expose_value=False, callback=lambda ctx, _p, v: ctx.meta.__setitem__("oom_unseen_share", v),
                     help="Share of one-GPU jobs whose out-of-memory end is not seen at all (only a "
                          "measurement at the share's limit tells): a jump far below it ends FAILED."),
        click.option("--oom-word-own-place", is_flag=True, default=False,
                     expose_value=False, callback=lambda ctx, _p, v: ctx.meta.__setitem__("oom_word_own_place", v),
                     help="A retry on the job's word (its report or its output, not a measurement at "
                          "its share's limit) goes back at its own place in the queue (by arrival), as "
                          "live; without it, at the head like every requeue."),
    ]


def _input_options() -> list:
    """Where the trace's tables come from and what is done with a row that cannot be read."""
    return [
        click.option("--data-dir", type=click.Path(file_okay=False), default=None,
                     help="Folder with philly_jobs.csv, workload_profiles.csv, "
                          "colocation_pairs.csv (default: $GPUPACK_DATA_DIR or shared/data/traces)."),
        click.option("--truth", type=click.Path(exists=True, dir_okay=False), default=None,
                     metavar="PAIRS.csv",
                     help="The pair speeds the replay slows packed jobs by (default: the "
                          "measured colocation_pairs.csv of --data-dir); the policies only "
                          "learn them by running pairs. Columns workload,beside,speed (or "
                          "Lucid's layout); speed 0: the pair cannot run together. See "
                          "docs/simulator.md and `simulate stress-pairs`."),
        click.option("--timezone", default=None, metavar="ZONE",
                     help="Zone of trace timestamps that carry none (sacct prints the "
                          "cluster's local time), e.g. Europe/Berlin. Default: UTC, whatever "
                          "this machine's zone."),
        click.option("--bad-rows", type=click.Choice(["refuse", "skip"]), default="refuse",
                     show_default=True,
                     help="A trace row that cannot be read (negative or NaN duration, GPUs "
                          "not a number, a short row, ...): refuse the trace, naming its line "
                          "and column, or skip it and count it in the summary."),
    ]


def _policy_options() -> list:
    """The packing policies' knobs (backfill, co-runner choice, MIG)."""
    return [
        click.option("--bf-depth", type=click.IntRange(min=0), default=100, show_default=True,
                     help="Queued jobs the backfill pass looks at (Slurm's bf_max_job_test)."),
        click.option("--corunner", "corunner_rule",
                     type=click.Choice(["best-pair", "lowest-util", "best-fit"]),
                     default="best-pair", show_default=True,
                     help="colocate: co-runner rule; best-pair: most predicted "
                          "throughput from the measured pair speeds."),
        click.option("--pair-predict/--no-pair-predict", default=True, show_default=True,
                     help="colocate: predict each pack's slowdown from the measured pairs "
                          "before packing (pack only where the job already there keeps "
                          ">= 90 %); off: the history rule alone (pack, then requeue on "
                          "> 10 % slowdown). Off needs --corunner lowest-util or best-fit."),
        click.option("--pair-knowledge", type=click.Choice(["counters", "observed", "model", "oracle"]),
                     default="counters", show_default=True,
                     help="colocate: what the pair prediction knows. counters: a pair's speeds "
                          "once the replay has run it, other pairs from the rules' pair model "
                          "(each job's utilisation and memory alone, with its spread; tried at "
                          "its 95 % upper bound), as the live submit path; observed: the same "
                          "with a feature model (utilisation, memory, label) judged at its "
                          "mean; model: that feature model alone; oracle: the replay's own pair "
                          "table (an upper bound no site has)."),
        click.option("--max-jobs-per-gpu", type=click.IntRange(min=1), default=None,
                     help="colocate: most jobs packed on one GPU (default 2), each still "
                          "predicted at >= 90 % of its speed alone; shard-fixed: jobs per GPU "
                          "(its fixed share count; default 2)."),
        click.option("--contention-threshold", type=click.FloatRange(0, 1, min_open=True),
                     default=0.10, show_default=True,
                     help="colocate: most throughput a running job may lose to a newcomer "
                          "(predicted before packing; measured after: the newcomer is requeued)."),
        click.option("--mig-static-layout", default=None, metavar="PROFILE|P@S,…",
                     help="mig-static: layout of each partitioned GPU (default: all smallest "
                          "instances, e.g. 7x1g.10gb)."),
        click.option("--mig-static-fraction", type=click.FloatRange(0, 1), default=0.5,
                     show_default=True,
                     help="mig-static: share of GPUs partitioned (the rest stay whole)."),
    ]


def _stacked(opts: list, fn):
    """``fn`` with each click option of ``opts``, in that order in --help."""
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def workload_options(fn):
    """The options of every command that replays a trace: the trace and cluster, the jobs'
    memory failures, the trace's inputs and the policies' knobs."""
    return _stacked([*_trace_options(), *_failure_options(), *_input_options(), *_policy_options()], fn)


def action_options(fn):
    """Knobs of the run-time actions (grow by preemption, regrouping), for every command."""
    return _stacked([
        click.option("--movable-fraction", type=click.FloatRange(0, 1), default=0.3,
                     show_default=True,
                     help="Regrouping: share of jobs that declare they can be moved (--requeue "
                          "with --signal=B:USR1@120, a checkpoint signal); a fixed hash of the "
                          "job id picks them. The rest are never moved."),
        click.option("--regroup-moves-per-plan", type=click.IntRange(min=0), default=2,
                     show_default=True, help="Regrouping: most jobs one plan may move."),
        click.option("--regroup-moves-per-hour", type=click.IntRange(min=0), default=12,
                     show_default=True,
                     help="Regrouping: most jobs moved in any hour of simulated time."),
    ], fn)


def _actions(movable_fraction, regroup_moves_per_plan, regroup_moves_per_hour) -> dict:
    return {"movable_fraction": movable_fraction, "regroup_moves_per_plan": regroup_moves_per_plan,
            "regroup_moves_per_hour": regroup_moves_per_hour}


def _to_meta(key: str):
    return lambda ctx, _p, v: ctx.meta.__setitem__(key, v)


def config_option(fn):
    fn = click.option(
        "--recurrence", type=click.FloatRange(0, 1), default=None, expose_value=False,
        callback=_to_meta("recurrence"), metavar="RATE",
        help="colocate: share of a known workload's later jobs whose identity (exact script, "
             "script with arguments abstracted, or user+name+command) has a history; the rest "
             "start as unknown jobs (simulator.recurrence; looser levels guess with more "
             "headroom, a wrong guess is a restart-oom). Default: 0.6 with the shipped settings, "
             "none (every later job known exactly) with replay-legacy.")(fn)
    fn = click.option(
        "--settings", type=click.Choice(SETTINGS), default=SHIPPED, show_default=True,
        expose_value=False, callback=_to_meta("settings"),
        help="shipped: the decisions of etc/gpupack.toml (or --config FILE), as a site runs "
             "them; replay-legacy: the replay's own settings before issue 34 (unknown jobs "
             "packed, no utilisation limit, a share per memory slice, no ladder, every later "
             "job of a profile known exactly), kept for the golden answers.")(fn)
    return click.option(
        "--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
        metavar="FILE",
        help="A site's gpupack.toml: its [packer] table and its [monitor] decision settings "
             "(contention threshold, restart costs, grow and regroup thresholds), read by the "
             "helper's own loaders, decide the replay as they decide the live cluster. Without "
             "it, the shipped etc/gpupack.toml (its [packer] table on --gpu-model). Flags "
             "given on the command line still override what they name.")(fn)


SHIPPED_TOML = Path(__file__).resolve().parents[2] / "etc" / "gpupack.toml"


def _meta() -> dict:
    ctx = click.get_current_context(silent=True)
    return ctx.meta if ctx is not None else {}


def _recurrence():
    """The run's identity levels (simulator.recurrence): --recurrence, else the default with the
    shipped settings; None with replay-legacy and for commands without --settings."""
    from simulator.recurrence import Recurrence

    meta = _meta()
    rate = meta.get("recurrence")
    if rate is not None:
        return Recurrence(rate=rate)
    return Recurrence() if meta.get("settings", LEGACY) == SHIPPED else None


def _given(name: str) -> bool:
    """Whether the flag behind parameter `name` was given on the command line."""
    from click.core import ParameterSource

    src = click.get_current_context().get_parameter_source(name)
    return src not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def _site(config_path, contention_threshold, actions, gpu_model="A100-80GB"):
    """The rules the replay decides by (None: replay-legacy) and the values of the flags they
    set: the rules' where the flag was not given. A site's file (--config) as it is; else the
    shipped etc/gpupack.toml, its [packer] table on ``gpu_model`` (refused where this install
    has no etc/: its values are not all the loaders' defaults)."""
    settings = _meta().get("settings", SHIPPED)
    if settings == LEGACY:
        if config_path is not None:
            raise click.UsageError("--settings replay-legacy is the replay's own preset: give no --config with it")
        return None, contention_threshold, actions
    from mig.catalog import load_catalog
    from simulator.settings import for_model
    from slurm_plugin.config.toml_file import load_config
    from slurm_plugin.helper.monitor_settings import load_monitor_settings

    if config_path is not None:
        site = load_monitor_settings(config_path).rules(load_config(config_path))
    else:
        if not SHIPPED_TOML.is_file():
            raise click.UsageError(f"the shipped settings file {SHIPPED_TOML} is not in this install: "
                                   "give --config FILE (e.g. a copy of etc/gpupack.toml) or --settings replay-legacy")
        site = load_monitor_settings(SHIPPED_TOML).rules(load_config(SHIPPED_TOML))
        site = site.with_overrides(config=for_model(site.config, load_catalog(gpu_model), gpu_model))
    if not _given("contention_threshold"):
        contention_threshold = site.contention_threshold
    actions = dict(actions)
    for key in ("regroup_moves_per_plan", "regroup_moves_per_hour"):
        if not _given(key):
            actions[key] = getattr(site, key)
    return site, contention_threshold, actions


def _settings_label(config_path) -> str:
    """What the replay decided by, as its report names it."""
    settings = _meta().get("settings", SHIPPED)
    rec = _recurrence()
    levels = "" if rec is None else f", recurrence {rec.rate:g}"
    if settings == LEGACY:
        return f"replay-legacy{levels}"
    return f"{config_path or 'shipped etc/gpupack.toml'}{levels}"


SWITCHES = ("pred", "grow", "regroup")


def _parse_name(name: str) -> tuple[str, dict]:
    """``colocate+pred+grow+regroup`` -> ("colocate", switches for SimConfig)."""
    policy, *parts = name.split("+")
    bad = [p for p in parts if p not in SWITCHES]
    if policy not in POLICY_NAMES or bad:
        raise click.UsageError(f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}"
                               f" (optionally with +pred, and for colocate +grow, +regroup)")
    return policy, {"predictor": "pred" in parts, "grow_preempt": "grow" in parts,
                    "regroup": "regroup" in parts}


def _named_config(name, gpus, gpu_model, bf_depth, corunner_rule, mig_static_layout,
                  mig_static_fraction, pair_predict, pair_knowledge, max_jobs_per_gpu,
                  contention_threshold, actions=None, site=None):
    from dataclasses import replace

    policy, sw = _parse_name(name)
    cfg = _config(policy, sw["predictor"], gpus, gpu_model, bf_depth, corunner_rule,
                  mig_static_layout, mig_static_fraction, pair_predict, pair_knowledge,
                  max_jobs_per_gpu, contention_threshold)
    if site is not None:  # the site's rules, its [packer] table too
        cfg = replace(cfg, site=site, packer=site.config)
    return replace(cfg, grow_preempt=sw["grow_preempt"], regroup=sw["regroup"], recurrence=_recurrence(),
                   **(actions or {}))


def _load(trace, gpu_model, n_jobs, time_scale, seed, growing_fraction, data_dir, inputs=None,
          report=None):
    """(specs, profiles, pairs); ``inputs``: the --truth/--timezone/--bad-rows values
    (:func:`_inputs`); ``report`` (a LoadReport) is filled with what the load skipped."""
    from mig.catalog import load_catalog
    from simulator import load_workload

    cat = load_catalog(gpu_model)
    return load_workload(trace, data_dir=data_dir, seed=seed, jobs=n_jobs,
                         time_scale=time_scale, growing_fraction=growing_fraction,
                         gpu_memory_bytes=cat.memory_mib << 20, report=report, **(inputs or {}))


def _inputs(truth, timezone, bad_rows) -> dict:
    ctx = click.get_current_context(silent=True)
    jump = ctx.meta.get("jump_fraction", 0.0) if ctx is not None else 0.0
    return {"truth": truth, "timezone": timezone, "bad_rows": bad_rows, "jump_fraction": jump}


def _config(policy, predictor, gpus, gpu_model, bf_depth, corunner_rule, mig_static_layout,
            mig_static_fraction, pair_predict=True, pair_knowledge="counters",
            max_jobs_per_gpu=None, contention_threshold=0.10):
    from simulator import SimConfig

    per_gpu = {}
    if max_jobs_per_gpu is not None:
        per_gpu = ({"max_jobs_per_gpu": max_jobs_per_gpu} if policy == "colocate" else
                   {"shard_jobs_per_gpu": max_jobs_per_gpu} if policy == "shard-fixed" else {})
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    silent = {k: meta[k] for k in ("oom_output_share", "oom_unseen_share") if k in meta}
    own_place = {"oom_word_own_place": True} if meta.get("oom_word_own_place") else {}
    if sum(silent.values()) > 1:
        raise click.UsageError("--oom-output-share and --oom-unseen-share are shares of the same jobs: "
                               "their sum must be 1 at most")
    return SimConfig(**per_gpu, **silent, **own_place, policy=policy, gpus=gpus, gpu_model=gpu_model, predictor=predictor,
                     bf_depth=bf_depth, corunner_rule=corunner_rule,
                     mig_static_layout=mig_static_layout,
                     mig_static_fraction=mig_static_fraction, pair_predict=pair_predict,
                     pair_knowledge=pair_knowledge, contention_threshold=contention_threshold)


def _policy_names(policies: str) -> list[str]:
    names = [p.strip() for p in policies.split(",") if p.strip()]
    for n in names:
        _parse_name(n)
    return names


def _int_list(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r}: give whole numbers separated by commas") from None
    if not out or min(out) < 1:
        raise click.BadParameter(f"{text!r}: give positive whole numbers separated by commas")
    return out


def _reasons(skipped: dict | None) -> str:
    return (": " + ", ".join(f"{n} {why}" for why, n in skipped.items())) if skipped else ""


def _human(s: dict) -> str:
    h = 3600.0
    lines = [
        f"{s['policy']} (predictor {s['predictor']}) on {s['gpus']} x {s['gpu_model']}: "
        f"{s['jobs']} jobs ({s['jobs_skipped']} skipped{_reasons(s.get('skipped'))}; "
        f"{s.get('jobs_never_ran', s['jobs_unfinished'])} never ran ({s['jobs_unfinished']} in "
        f"the replay, {s.get('trace_load', {}).get('never_ran', 0)} never started in the "
        f"trace); {s['jobs_with_own_figures']} with their own GPU figures from sacct; "
        f"{s.get('trace_load', {}).get('shares', 0)} asked for a share of one GPU)",
        f"  makespan {s['makespan_s'] / h:.1f} h; JCT avg {s['avg_jct_s'] / h:.2f} h, "
        f"p95 {s['p95_jct_s'] / h:.2f} h; queueing avg {s['avg_queue_s'] / h:.2f} h, "
        f"p95 {s['p95_queue_s'] / h:.2f} h",
        f"  GPU util {s['gpu_util']:.1%}, allocated {s['gpu_alloc']:.1%}, memory "
        f"{s['gpu_mem_util']:.1%}",
        f"  preempted {s['jobs_preempted']} jobs ({s['preemptions']} times), OOM restarts "
        f"{s['oom_restarts']}, early restarts (predictor) {s['predictive_restarts']} "
        f"({s['memory_warnings_kept']} warnings kept running: a restart priced higher), MIG "
        f"reconfigurations {s['mig_reconfigurations']}",
        f"  out of memory in a share: {s['oom_jobs_retried']} jobs retried "
        f"({s.get('oom_retried_on_output', 0)} on their output's word), {s['oom_jobs_left_failed']} left "
        f"FAILED ({s.get('oom_missed', 0)} never seen), {s.get('oom_lost_gpu_h', 0.0):.1f} GPU-h lost to "
        f"their failed attempts ({s.get('oom_missed_lost_gpu_h', 0.0):.1f} by the unseen, whose "
        f"{s.get('oom_missed_work_gpu_h', 0.0):.1f} GPU-h of work never ran to its end)",
        f"  jobs failed {s['jobs_failed']} ({s['pair_failures']} attempts beside a pair that "
        f"cannot run together), restarted {s['jobs_restarted']}, work lost "
        f"{s['lost_gpu_h']:.1f} GPU-h",
        f"  slowdown vs alone: avg {s['avg_slowdown']:.3f}, p50 {s['p50_slowdown']:.3f}, "
        f"p95 {s['p95_slowdown']:.3f}, max "
        f"{s['run_slowdown_max']:.3f}; {s['jobs_shared']} jobs shared a GPU "
        f"({s['jobs_in_unmeasured_pairs']} in unmeasured pairs); within measured pair speeds: "
        f"{'yes' if s['pair_bound_ok'] else 'NO'} (worst slowdown / bound "
        f"{s['pair_bound_worst']:.3f} over {s['pair_bound_jobs']} jobs)",
        f"  grow by preemption {s['grow_preempt']}: {s['grow_preemptions']} younger jobs evicted "
        f"({s['grow_lost_work_s'] / h:.1f} h of work lost), {s['grow_restarts_in_place']} growers "
        f"restarted in place, {s['grow_declined']} sent through the queue; regroup {s['regroup']}: "
        f"{s['regroup_plans']} plans, {s['regroup_moves']} moves "
        f"({s['regroup_lost_work_s'] / h:.1f} h lost to moves); multi-GPU jobs queued avg "
        f"{s['multi_gpu_avg_queue_s'] / h:.2f} h",
        f"  simulated {s['sim_events']} events in {s['sim_wall_s']:.1f} s",
    ]
    return "\n".join(lines)


@click.group(invoke_without_command=True, context_settings=CONTEXT_SETTINGS,
             short_help="Replay a job trace on a simulated cluster under a packing policy.")
@click.option("--policy", type=click.Choice(POLICY_NAMES), default=None,
              help="Policy to simulate (required without a sub-command).")
@click.option("--predictor", type=click.Choice(["on", "off"]), default="off", show_default=True,
              help="Restart growing jobs on a larger size before they run out of memory.")
@click.option("--grow-preempt", type=click.Choice(["on", "off"]), default="off", show_default=True,
              help="colocate: a packed job that must grow evicts younger packed neighbours on "
                   "its GPU and restarts bigger in place (packer.grow, the helper's decision).")
@click.option("--regroup", type=click.Choice(["on", "off"]), default="off", show_default=True,
              help="colocate: move jobs that declared they can be moved to free whole GPUs "
                   "for a waiting head of the queue (packer.regroup, the helper's planner).")
@workload_options
@action_options
@config_option
@click.option("--jobs-csv", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Also write each job's numbers (JCT, queueing, slowdown, restarts) here.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
@library_errors
def simulate(ctx, policy, predictor, grow_preempt, regroup, trace, gpus, gpu_model, n_jobs,
             time_scale, seed, growing_fraction, data_dir, truth, timezone, bad_rows, bf_depth, corunner_rule, pair_predict,
             pair_knowledge, max_jobs_per_gpu, contention_threshold, mig_static_layout,
             mig_static_fraction, movable_fraction, regroup_moves_per_plan,
             regroup_moves_per_hour, config_path, jobs_csv, as_json):
    """Replay a job trace on N simulated GPUs and report what the policy gives.

    Discrete-event replay with Slurm-like FIFO + EASY backfill, calling the suite's own
    packer/, mig/ and predictor/ code. Workload: Philly arrivals, durations and GPU counts,
    each job given a measured workload profile; packed pairs slowed by their measured speeds.

    \b
    gpupack simulate --policy colocate --trace philly --gpus 1000 --gpu-model A100-80GB --json
    gpupack simulate --policy mig-in-order --predictor on --jobs 2000 --gpus 50
    gpupack simulate --policy exclusive --trace sacct:jobs.txt --gpus 64
    gpupack simulate --policy colocate --predictor on --grow-preempt on --regroup on --gpus 450
    gpupack simulate --policy colocate --predictor on --config /etc/slurm/gpupack.toml
    gpupack simulate compare --gpus 1000 --out sim-report/
    """
    if ctx.invoked_subcommand is not None:
        return
    if policy is None:
        raise click.UsageError("give --policy NAME (or a sub-command, e.g. `compare`)")
    from simulator import LoadReport, run_policy, write_jobs_csv
    from simulator.metrics import with_load

    report = LoadReport()
    specs, profiles, pairs = _load(trace, gpu_model, n_jobs, time_scale, seed, growing_fraction,
                                   data_dir, _inputs(truth, timezone, bad_rows), report)
    name = policy + "".join(f"+{k}" for k, v in (("pred", predictor), ("grow", grow_preempt),
                                                  ("regroup", regroup)) if v == "on")
    site, contention_threshold, actions = _site(
        config_path, contention_threshold,
        _actions(movable_fraction, regroup_moves_per_plan, regroup_moves_per_hour), gpu_model)
    cfg = _named_config(name, gpus, gpu_model, bf_depth, corunner_rule, mig_static_layout,
                        mig_static_fraction, pair_predict, pair_knowledge, max_jobs_per_gpu,
                        contention_threshold, actions, site)
    summ, res = run_policy(cfg, specs, profiles, pairs)
    summ = with_load(summ, report)
    summ["trace"] = trace
    summ["truth"] = truth or "colocation_pairs.csv (measured)"
    summ["site_config"] = config_path
    summ["settings"] = _settings_label(config_path)
    if jobs_csv:
        write_jobs_csv(res, jobs_csv)
    if as_json:
        click.echo(json.dumps(summ, sort_keys=False, allow_nan=False))
    else:
        click.echo(_human(summ))


@simulate.command(context_settings=CONTEXT_SETTINGS)
@click.option("--policies", default=",".join(POLICY_NAMES), show_default=True, metavar="P1,P2,…",
              help="Policies to run; add `+pred` to a name for predictor on (e.g. colocate+pred), "
                   "and to colocate `+grow` (grow by preemption) and/or `+regroup`.")
@workload_options
@action_options
@config_option
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="sim-report",
              show_default=True, help="Folder for report.md, results.json and the PNG plots.")
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots (no matplotlib needed).")
@click.option("--gpus-list", default=None, metavar="G1,G2,…",
              help="Loads: also run every policy at each of these GPU counts (sweep.md).")
@click.option("--target-alloc", default=None, metavar="P1,P2,…",
              help="Loads: the GPU counts at which exclusive keeps these percentages of its GPUs "
                   "allocated (found by bisection), e.g. 70,85,95.")
@click.option("--offered-loads", default=None, metavar="R1,R2,…",
              help="Loads: offered load per GPU (GPU-seconds the trace asks for per second of "
                   "its span, over the cluster's GPUs): below 1 the queue drains, above 1 it "
                   "grows; each becomes a GPU count, e.g. 0.6,0.9,1.2,1.5.")
@click.option("--seeds", "seed_list", default=None, metavar="S1,S2,…",
              help="Loads: seeds of the profile draw to average over (95 % intervals); "
                   "default: --seed alone.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
@click.option("--jobs-in-parallel", "workers", type=click.IntRange(min=1), default=None,
              help="Replays (policy, size, load, seed cells) run at once, each in its own "
                   "process; the same report whatever the number. Default: the machine's "
                   "core count (1: one after the other, here).")
@library_errors
def compare(policies, trace, gpus, gpu_model, n_jobs, time_scale, seed, growing_fraction,
            data_dir, truth, timezone, bad_rows, bf_depth, corunner_rule, pair_predict,
            pair_knowledge, max_jobs_per_gpu,
            contention_threshold, mig_static_layout, mig_static_fraction, movable_fraction,
            regroup_moves_per_plan, regroup_moves_per_hour, config_path, out_dir, no_plots,
            gpus_list, target_alloc, offered_loads,
            seed_list, as_json, workers):
    """Run several policies on one workload; write a Markdown report with PNG plots.

    The report has the comparison table, the best policy of the suite against every
    baseline (makespan, average JCT), the JCT distributions and GPU utilisation over time.
    Plots need matplotlib (`pip install 'slurm-gpu-packer[plots]'`).

    \b
    gpupack simulate compare --gpus 1000 --out sim-report/
    gpupack simulate compare --policies exclusive,colocate,colocate+pred --jobs 5000 --gpus 100
    gpupack simulate compare --gpu-model H100-80GB --target-alloc 70,85,95 --seeds 0,1,2 \
        --policies exclusive+pred,shard-fixed+pred,colocate+pred --out sim-loads/
    gpupack simulate compare --gpu-model H100-80GB --gpus 450 --out sim-grow/ --policies \
        colocate+pred,colocate+pred+grow,colocate+pred+regroup,colocate+pred+grow+regroup

    gpupack simulate compare --gpu-model H100-80GB --jobs 3000 --offered-loads 0.6,0.9,1.2,1.5 \
        --seeds 0,1,2 --policies exclusive,shard-fixed,colocate+pred --out sim-sweep/
    gpupack simulate compare --truth stress.csv --jobs 3000 --offered-loads 0.6,1.2 --seeds 0,1

    With --gpus-list, --target-alloc, --offered-loads or --seeds, every policy runs at every
    load on every seed instead, and sweep.md gives means with 95 % intervals and the range
    over seeds of average and p95 JCT, per-job slowdown (p50, p95), jobs failed and
    restarted, work lost to restarts and prediction error, the best baseline over the best
    suite policy per load, and (matplotlib) sweep_jct.png: average JCT against cluster size
    for every policy.
    """
    from simulator.parallel import default_workers
    from simulator.report import compare as run_compare

    workers = workers or default_workers()
    names = _policy_names(policies)
    site, contention_threshold, actions = _site(
        config_path, contention_threshold,
        _actions(movable_fraction, regroup_moves_per_plan, regroup_moves_per_hour), gpu_model)
    inputs = _inputs(truth, timezone, bad_rows)
    if gpus_list or target_alloc or seed_list or offered_loads:
        _sweep(names, trace, gpus, gpu_model, n_jobs, time_scale, seed, growing_fraction,
               data_dir, bf_depth, corunner_rule, pair_predict, pair_knowledge,
               max_jobs_per_gpu, contention_threshold, mig_static_layout, mig_static_fraction,
               out_dir, gpus_list, target_alloc, seed_list, as_json, actions, site,
               inputs=inputs, offered_loads=offered_loads, plots=not no_plots, workers=workers)
        return
    from simulator import LoadReport

    report = LoadReport()
    specs, profiles, pairs = _load(trace, gpu_model, n_jobs, time_scale, seed, growing_fraction,
                                   data_dir, inputs, report)
    configs = [
        _named_config(n, gpus, gpu_model, bf_depth, corunner_rule, mig_static_layout,
                      mig_static_fraction, pair_predict, pair_knowledge, max_jobs_per_gpu,
                      contention_threshold, actions, site)
        for n in names
    ]
    workload = {"trace": trace, "jobs": len(specs), "gpus": gpus, "gpu_model": gpu_model,
                "time_scale": time_scale, "seed": seed, "growing_fraction": growing_fraction,
                "truth": truth or "colocation_pairs.csv (measured)",
                "trace_load": report.as_dict(),
                **({"site_config": config_path} if config_path else {}),
                "settings": _settings_label(config_path)}
    with _cell_bar(len(configs)) as tick:
        out = run_compare(configs, specs, profiles, pairs, out_dir, workload=workload,
                          plots=not no_plots, progress=tick, workers=workers)
    if as_json:
        click.echo(json.dumps(out["results"], allow_nan=False))
    else:
        click.echo(out["table"])
        click.echo(f"report: {out['report']}")
        for w in out["warnings"]:
            click.echo(f"warning: {w}", err=True)


def _sweep(names, trace, gpus, gpu_model, n_jobs, time_scale, seed, growing_fraction, data_dir,
           bf_depth, corunner_rule, pair_predict, pair_knowledge, max_jobs_per_gpu,
           contention_threshold, mig_static_layout, mig_static_fraction, out_dir, gpus_list,
           target_alloc, seed_list,
           as_json, actions=None, site=None, inputs=None, offered_loads=None, plots=True,
           workers=1):
    from simulator import LoadReport
    from simulator.sweep import gpus_for_alloc, gpus_for_load, sweep

    say = functools.partial(click.echo, err=True)
    seeds = [int(x) for x in seed_list.split(",") if x.strip()] if seed_list else [seed]
    report = LoadReport()  # the trace is the same for every seed: the first load's report
    workloads = {sd: _load(trace, gpu_model, n_jobs, time_scale, sd, growing_fraction, data_dir,
                           inputs, report if i == 0 else None)
                 for i, sd in enumerate(seeds)}
    counts = _int_list(gpus_list) if gpus_list else []
    loads: dict[int, str] = {}
    for pct in (_int_list(target_alloc) if target_alloc else []):
        g, got = gpus_for_alloc(pct / 100.0, *workloads[seeds[0]], gpu_model, progress=say)
        loads[g] = f"exclusive {got:.1%} allocated, target {pct} %"
        counts.append(g)
    for rho in _float_list(offered_loads) if offered_loads else []:
        g = gpus_for_load(rho, workloads[seeds[0]][0])
        loads[g] = f"offered load {rho:g} per GPU" + (
            f"; {loads[g]}" if g in loads else "")
        counts.append(g)
    if not counts:
        counts = [gpus]
    counts = sorted(dict.fromkeys(counts))
    configs = [
        _named_config(n, counts[0], gpu_model, bf_depth, corunner_rule, mig_static_layout,
                      mig_static_fraction, pair_predict, pair_knowledge, max_jobs_per_gpu,
                      contention_threshold, actions, site)
        for n in names
    ]
    truth = (inputs or {}).get("truth") or "colocation_pairs.csv (measured)"
    with _cell_bar(len(configs) * len(counts) * len(workloads)) as tick:
        out = sweep(configs, workloads, counts, out_dir, loads=loads, progress=tick,
                    about={"trace": trace, "truth": truth, "gpu_model": gpu_model,
                           "jobs_replayed": len(workloads[seeds[0]][0]),
                           "trace_load": report.as_dict()}, plots=plots, workers=workers)
    if as_json:
        click.echo(json.dumps(out["table"], allow_nan=False))
    else:
        click.echo(out["markdown"])
    for w in out["warnings"]:
        say(f"warning: {w}")


@contextlib.contextmanager
def _cell_bar(n: int):
    """A progress bar on stderr over ``n`` replays; yields the callback each replay's line
    goes to as it ends (the line printed above the bar)."""
    with click.progressbar(length=n, label="replays", file=sys.stderr, show_pos=True,
                           show_eta=True) as bar:
        def tick(line: str) -> None:
            click.echo(("" if bar.hidden else "\r\033[K") + line, err=True)
            bar.update(1)

        yield tick


@simulate.command("repeat-trace", context_settings=CONTEXT_SETTINGS)
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Folder with philly_jobs.csv (default: $GPUPACK_DATA_DIR or shared/data/traces).")
@click.option("--copies", type=click.IntRange(min=1), default=None,
              help="Copies of the trace (default: as many as --jobs needs).")
@click.option("--jobs", "n_jobs", type=click.IntRange(min=1), default=None,
              help="Write at most this many rows, the earliest (e.g. 1000000).")
@click.option("-o", "--out", "out_path", type=click.Path(dir_okay=False, writable=True), required=True,
              help="The CSV to write (Philly's layout: replay it with --trace philly:FILE).")
@library_errors
def repeat_trace(data_dir, copies, n_jobs, out_path):
    """Write a longer trace: the Philly arrivals repeated, each copy shifted past the one
    before by the trace's span (and one mean gap), durations and GPU counts kept.

    \b
    gpupack simulate repeat-trace --jobs 1000000 -o philly-1m.csv
    gpupack simulate --policy colocate --trace philly:philly-1m.csv --gpus 450 --gpu-model H100-80GB
    """
    from dataclasses import asdict
    from pathlib import Path

    from simulator.trace_repeat import repeat_philly
    from simulator.workload import _data_file

    if copies is None and n_jobs is None:
        raise click.UsageError("give --copies or --jobs")
    src = _data_file(Path(data_dir) if data_dir else None, "philly_jobs.csv")
    click.echo(json.dumps({"wrote": out_path, **asdict(repeat_philly(src, Path(out_path), copies=copies,
                                                                    jobs=n_jobs))}))


def _float_list(text: str) -> list[float]:
    try:
        out = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or not all(0 < x < 1e6 for x in out):
        raise click.BadParameter(f"{text!r}: give positive numbers separated by commas")
    return out


@simulate.command(context_settings=CONTEXT_SETTINGS)
@click.option("--policies", default="exclusive,colocate+pred", show_default=True,
              metavar="P1,P2,…", help="Policies to time (`+pred`: predictor on).")
@click.option("--jobs-list", default="10000,20000,40000,82247", show_default=True,
              metavar="N1,N2,…", help="Job counts (first N of the workload) timed at --gpus.")
@click.option("--gpus-list", default="250,400,1000", show_default=True, metavar="G1,G2,…",
              help="GPU counts timed on the whole workload.")
@workload_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="sim-report",
              show_default=True,
              help="Folder for scaling.md and scaling.json (appended to its report.md if any).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as one JSON object.")
@library_errors
def scaling(policies, jobs_list, gpus_list, trace, gpus, gpu_model, n_jobs, time_scale, seed,
            growing_fraction, data_dir, truth, timezone, bad_rows, bf_depth, corunner_rule, pair_predict, pair_knowledge,
            max_jobs_per_gpu, contention_threshold, mig_static_layout, mig_static_fraction, out_dir, as_json):
    """Time the simulator against the number of jobs and of GPUs.

    \b
    gpupack simulate scaling --policies exclusive,colocate+pred --gpus 1000 --out sim-report/
    gpupack simulate scaling --jobs-list 5000,10000 --gpus-list 100,200 --gpus 200
    """
    from simulator.report import scaling as run_scaling

    names = _policy_names(policies)
    job_counts, gpu_counts = _int_list(jobs_list), _int_list(gpus_list)
    specs, profiles, pairs = _load(trace, gpu_model, n_jobs, time_scale, seed, growing_fraction,
                                   data_dir, _inputs(truth, timezone, bad_rows))
    job_counts = sorted({min(n, len(specs)) for n in job_counts})
    configs = [
        _named_config(n, gpus, gpu_model, bf_depth, corunner_rule, mig_static_layout,
                      mig_static_fraction, pair_predict, pair_knowledge, max_jobs_per_gpu,
                      contention_threshold)
        for n in names
    ]
    out = run_scaling(configs, specs, profiles, pairs, job_counts, gpu_counts, out_dir,
                      progress=lambda m: click.echo(m, err=True))
    if as_json:
        click.echo(json.dumps(out["rows"], allow_nan=False))
    else:
        click.echo(out["markdown"])


simulate.add_command(stress_pairs)
