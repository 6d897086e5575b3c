"""`gpupack actions`: the run-time actions' decisions (shadow or enforced) and how often they
were right, from the action ledger in the SQLite database."""
from __future__ import annotations

import json
from pathlib import Path

import click

from slurm_plugin.cli.store_options import database_options, opened_store

CONTEXT = {"help_option_names": ["-h", "--help"]}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


@click.group(context_settings=CONTEXT)
def actions() -> None:
    """The run-time actions (requeue-contention, restart-memory, grow-preempt, regroup): what
    they decided, in shadow or enforce mode (`[monitor.actions]`), and how often they were right."""


@actions.command(context_settings=CONTEXT)
@database_options("the action ledger")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object per action) instead of a table.")
def report(config: Path, database: Path | None, as_json: bool) -> None:
    """Per action: decisions in shadow and enforce mode, their outcomes, precision and recall.

    \b
    right     the decision was borne out: restart-memory, the run went over the share it had
              (or ended out of memory); requeue-contention, a hurt neighbour's speed came
              back once the newcomer left its GPU (shadow: ended; enforce: requeued)
              grow-preempt, the grown run went past its old share and the evicted jobs
              started again; regroup, the head started by the plan's expected start
              (shadow: it still waited then)
    wrong     restart-memory, the run ended below its share; requeue-contention, no hurt
              neighbour's speed came back; grow-preempt, the grown run completed within its
              old share; regroup, the head started later (shadow: by then, with no move)
    unknown   nothing left to judge (e.g. the hurt jobs ended first); pending: not yet known
    missed    a run that needed the action with no decision before: it ran out of memory,
              or its departure let a slowed neighbour's speed recover
    precision right / (right + wrong)
    recall    right / (right + missed)
    """
    from store.ledger import ActionLedger
    from packer.action_report import summarise

    with opened_store(config, database) as store:
        summaries = summarise(ActionLedger(store, create=False).counts())
    if as_json:
        click.echo(json.dumps([s.as_dict() for s in summaries], indent=1))
        return
    click.echo(f"{'action':20} {'shadow':>6} {'enforce':>7} {'right':>5} {'wrong':>5} {'unknown':>7} "
               f"{'pending':>7} {'missed':>6} {'precision':>9} {'recall':>6}")
    for s in summaries:
        click.echo(f"{s.action:20} {s.shadow:>6} {s.enforce:>7} {s.right:>5} {s.wrong:>5} {s.unknown:>7} "
                   f"{s.pending:>7} {s.missed:>6} {_pct(s.precision):>9} {_pct(s.recall):>6}")


@actions.command(name="list", context_settings=CONTEXT)
@database_options("the action ledger")
@click.option("--action", default=None,
              help="Only this action (requeue-contention, restart-memory, grow-preempt, regroup).")
@click.option("-n", "--limit", default=50, show_default=True, help="How many of the oldest rows.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def list_rows(config: Path, database: Path | None, action: str | None, limit: int, as_json: bool) -> None:
    """Each decision (and miss) with its measured reason and its outcome."""
    from dataclasses import asdict

    from store.ledger import ActionLedger

    with opened_store(config, database) as store:
        rows = ActionLedger(store, create=False).rows(action, limit)
    if as_json:
        click.echo(json.dumps([asdict(r) for r in rows], indent=1))
        return
    if not rows:
        click.echo("no decisions yet")
    for r in rows:
        click.echo(f"{r.job_id:>8}  {r.action:18} {r.mode:7} {r.outcome or 'pending':8} {r.reason}"
                   + (f" -> {r.outcome_detail}" if r.outcome_detail and r.outcome_detail != r.reason else ""))
