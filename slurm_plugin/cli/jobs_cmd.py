"""`gpupack jobs`: every job Slurm knows, with the packer's decision about it.

The same view in plain Slurm:

    squeue --state=all -O "JobID:8,Name:20,UserName:10,State:12,tres-per-node:20,AdminComment:90"
"""
from __future__ import annotations

import json
import logging
from typing import Any

import click

from packer.comment import parse as parse_comment
from slurm_plugin.slurm.errors import SlurmCommandError, SlurmError
from slurm_plugin.slurm.gres import format_gres
from slurm_plugin.slurm.model import Job
from slurm_plugin.slurm.runner import SlurmRunner

log = logging.getLogger(__name__)

COLUMNS = ("JOBID", "NAME", "USER", "STATE", "DECISION", "GRES", "DETAIL", "NODES")


def job_view(job: Job) -> dict[str, Any]:
    """One job as `gpupack jobs --json` prints it."""
    record = parse_comment(job.admin_comment)
    return {
        "job_id": job.job_id,
        "name": job.name,
        "user": job.user,
        "state": job.state,
        "state_reason": job.state_reason,
        "decision": record.applied_verdict if record else "untouched",
        "advised": record.advised if record else False,
        "verdict": record.verdict if record else None,
        "reason": record.reason if record else None,
        "shards": record.shards if record else None,
        "fingerprint": record.fingerprint if record else None,
        "gres": format_gres(job.gres),
        "gres_items": [
            {"name": g.name, "type": g.type, "count": g.count, "per": g.per} for g in job.gres
        ],
        "admin_comment": job.admin_comment,
        "nodes": job.nodes,
        "restart_cnt": job.restart_cnt,
        "submit_time": job.submit_time.isoformat() if job.submit_time else None,
    }


def _printable(text: object, width: int | None = None) -> str:
    shown = "".join(c if c.isprintable() else "?" for c in ("" if text is None else str(text)))
    if width is not None and len(shown) > width:
        shown = shown[: width - 1] + "…"
    return shown or "-"


def _detail(view: dict[str, Any]) -> str:
    parts = []
    if view["advised"]:
        parts.append(f"advised:{view['verdict']}")
    if view["shards"] is not None:
        parts.append(f"shard:{view['shards']}")
    if view["reason"]:
        parts.append(f"reason={view['reason']}")
    if view["state_reason"] and view["state"] == "PENDING":
        parts.append(f"({view['state_reason']})")
    return " ".join(parts)


def render_table(views: list[dict[str, Any]]) -> str:
    rows = [COLUMNS] + [
        (
            str(v["job_id"]),
            _printable(v["name"], 24),
            _printable(v["user"], 12),
            _printable(v["state"]),
            v["decision"],
            _printable(v["gres"]),
            _printable(_detail(v)),
            _printable(v["nodes"]),
        )
        for v in views
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows
    )


def collect_jobs(runner: SlurmRunner, include_accounting: bool) -> list[Job]:
    jobs = {job.job_id: job for job in runner.jobs()}
    if include_accounting:
        try:
            for job in runner.accounting():
                jobs.setdefault(job.job_id, job)
        except SlurmCommandError as exc:
            click.echo(
                f"Warning: no accounting history ({exc.stderr.strip() or exc}); "
                "showing the jobs slurmctld still knows.",
                err=True,
            )
    return sorted(jobs.values(), key=lambda job: job.job_id)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
@click.option(
    "--all",
    "include_accounting",
    is_flag=True,
    help="Also list older finished jobs from accounting (sacct; needs slurmdbd).",
)
@click.pass_context
def jobs(ctx: click.Context, as_json: bool, include_accounting: bool) -> None:
    """Show every job with the packer's decision: packed, exclusive or untouched.

    Lists pending, running and recently finished jobs (those slurmctld still keeps,
    see MinJobAge). The decision is read from each job's AdminComment record
    (`gpupack: ...`); a job without one is `untouched`; in advise mode the verdict is
    shown but the job counts as untouched. Honours SLURM_CONF.
    """
    runner = ctx.obj.get("slurm_runner") if isinstance(ctx.obj, dict) else None
    try:
        found = collect_jobs(runner or SlurmRunner(), include_accounting)
    except SlurmError as exc:
        raise click.ClickException(str(exc)) from exc
    views = [job_view(job) for job in found]
    if as_json:
        click.echo(json.dumps(views, indent=2, ensure_ascii=False))
    elif views:
        click.echo(render_table(views))
    else:
        click.echo("No jobs.")
