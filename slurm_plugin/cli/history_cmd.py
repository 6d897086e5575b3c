"""`gpupack history`: what the packer knows about earlier runs."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from slurm_plugin.helper.settings import DEFAULT_CONFIG

CTX = {"help_option_names": ["-h", "--help"]}
GIB = 1024**3
config_option = click.option(
    "--config", type=click.Path(path_type=Path), default=DEFAULT_CONFIG, show_default=True,
    envvar="GPUPACK_CONFIG", help="gpupack.toml naming the database (env GPUPACK_CONFIG).",
)


def _store(config: Path):
    from store.db import Store, StoreError
    from slurm_plugin.helper.settings import load_paths

    try:
        return Store(load_paths(config).database)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group(context_settings=CTX)
def history() -> None:
    """Show or record the observed usage of finished jobs (what estimates come from)."""


def _curve_summary(curve) -> dict:
    return {"points": len(curve.points), "samples": curve.samples, "peak_mem_bytes": curve.peak_bytes,
            "duration_s": round(curve.duration_s, 2), "end_state": curve.end_state, "ended_at": curve.ended_at,
            "capacity_bytes": curve.capacity_bytes, "capacity_label": curve.capacity_label}


@history.command(context_settings=CTX)
@click.argument("fingerprint", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--limit", default=100, show_default=True, help="At most this many runs.")
@config_option
def show(fingerprint: str | None, as_json: bool, limit: int, config: Path) -> None:
    """List recorded runs (of FINGERPRINT, or all), newest first, with the estimate each
    fingerprint gives and the summary of each run's stored memory curve (points, peak,
    duration). With FINGERPRINT, the curves of its runs that are not history (requeued,
    failed) follow."""
    from store.curves import RunCurves

    store = _store(config)
    runs = store.runs(fingerprint, limit=limit)
    curves = RunCurves(store).of_fingerprint(fingerprint, limit=max(limit, 1) * 4)
    by_run = {(c.job_id, c.fingerprint, c.started_at): c for c in curves}
    matched = [by_run.pop((r.job_id, r.fingerprint, r.started_at), None) for r in runs]
    others = sorted(by_run.values(), key=lambda c: -c.ended_at) if fingerprint else []
    if as_json:
        out = []
        for run, curve in zip(runs, matched):
            item = asdict(run)
            est = store.estimate(run.fingerprint)
            item["estimate"] = asdict(est) if est else None
            item["curve"] = _curve_summary(curve) if curve else None
            out.append(item)
        if fingerprint:
            out += [{"job_id": c.job_id, "fingerprint": c.fingerprint, "started_at": c.started_at,
                     "history": False, "curve": _curve_summary(c)} for c in others]
        click.echo(json.dumps(out, indent=1))
        return
    if not runs and not others:
        click.echo(f"no history of {fingerprint} yet" if fingerprint
                   else "no history yet: jobs are profiled on their first run")
        return
    if runs:
        click.echo(f"{'JOBID':>7}  {'FINGERPRINT':16}  {'USER':10} {'NAME':16} {'PEAK':>10} {'UTIL':>5}  SOURCE  KIND")
    for r, curve in zip(runs, matched):
        util = f"{r.mean_util_pct:.0f}%" if r.mean_util_pct is not None else "-"
        kind = (f"lower bound ({r.end_state})" if r.lower_bound else "measured, GPU untouched" if r.untouched
                else "measured")
        if r.need_bytes is not None:
            kind += f", needs {r.need_bytes / GIB:.2f}Gi (its allocator's peak)"
        click.echo(f"{r.job_id:>7}  {r.fingerprint:16}  {r.user[:10]:10} {r.name[:16]:16} "
                   f"{'>=' if r.lower_bound else '  '}{r.peak_mem_bytes / GIB:>6.2f}Gi {util:>5}  {r.source}  {kind}")
        if curve is not None:
            click.echo(f"{'':9}curve: {curve.summary()}")
    if others:
        click.echo(f"runs of {fingerprint} that are not history, with their curve:")
        for c in others:
            click.echo(f"{c.job_id:>7}  curve: {c.summary()}")


@history.command(context_settings=CTX)
@click.option("--job-id", type=int, required=True, help="A job Slurm still knows (finished recently).")
@click.option("--peak-mem-gib", type=click.FloatRange(min=0, min_open=True), required=True, help="Observed peak GPU memory, GiB.")
@click.option("--util", type=click.FloatRange(0, 100), required=True, help="Mean GPU utilisation, percent.")
@click.option("--throughput", type=click.FloatRange(min=0), default=None, help="Iterations per second.")
@config_option
def record(job_id: int, peak_mem_gib: float, util: float, throughput: float | None, config: Path) -> None:
    """Record a finished job's peak memory and utilisation under its fingerprint."""
    from slurm_plugin.helper.settings import load_paths
    from slurm_plugin.history_recorder import record_job
    from slurm_plugin.slurm.errors import SlurmError
    from slurm_plugin.slurm.runner import SlurmRunner

    paths = load_paths(config)
    runner = SlurmRunner(slurm_conf=str(paths.slurm_conf) if paths.slurm_conf else None)
    try:
        run = record_job(_store(config), runner, job_id, int(peak_mem_gib * GIB), util, throughput, source="manual")
    except SlurmError as exc:
        raise click.ClickException(f"cannot find job {job_id} in Slurm: {exc}") from exc
    click.echo(f"recorded job {job_id} under fingerprint {run.fingerprint}: peak {peak_mem_gib:.2f} GiB, util {util:.0f}%")
