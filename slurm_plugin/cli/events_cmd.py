"""`gpupack events`: what the suite did to which job and why, from the SQLite event log."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import click

from slurm_plugin.cli.store_options import database_options, opened_store


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@database_options("the event log")
@click.option("--job", "job_id", type=int, default=None, help="Only this job's events.")
@click.option("--kind", default=None, help="Only events of this kind (e.g. requeue-contention, restart-memory).")
@click.option("-n", "--limit", default=50, show_default=True, help="How many of the newest events.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def events(config: Path, database: Path | None, job_id: int | None, kind: str | None, limit: int, as_json: bool) -> None:
    """List what the suite did (requeues, restarts, pair avoidance, history), newest first."""
    with opened_store(config, database) as store:
        rows = store.events(limit=limit if kind is None else max(limit, 1000), job_id=job_id)
    if kind is not None:
        rows = [e for e in rows if e.kind == kind][:limit]
    if as_json:
        click.echo(json.dumps([{"job_id": e.job_id, "kind": e.kind, "detail": e.detail, "at": e.at, "data": e.data}
                               for e in rows], indent=1))
        return
    if not rows:
        click.echo("no events")
        return
    for e in rows:
        when = datetime.fromtimestamp(e.at).strftime("%Y-%m-%d %H:%M:%S")
        job = str(e.job_id) if e.job_id is not None else "-"
        click.echo(f"{when}  {job:>8}  {e.kind:20}  {e.detail}")
