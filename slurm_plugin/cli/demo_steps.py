"""What the live demo scenarios (`demo_grow`, `demo_regroup`) share: writing their job scripts,
submitting them, waiting on Slurm, reading their events back from the event log, and printing
what happened."""
from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

import click

from store.db import Store


class Outcome(Protocol):
    """What a scenario returns: its events (oldest first), whether it went as it should, and
    all of it as a dict for `--json`."""

    events: list[dict]
    ok: bool

    def to_dict(self) -> dict: ...


def write_script(path: Path, text: str) -> Path:
    """An executable job script at `path`."""
    path.write_text(text)
    path.chmod(0o755)
    return path


def sbatch(env: dict[str, str], workdir: Path, script: Path, name: str, *args: str) -> int:
    """Submit `script` as job `name` with `args` (its output to `workdir`/NAME-ID.out); its id."""
    result = subprocess.run(["sbatch", "--parsable", "-J", name, *args, "-o", f"{workdir}/%x-%j.out", str(script)],
                            env=env, cwd=workdir, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"sbatch {name}: {result.stderr.strip()}")
    return int(result.stdout.strip().split(";")[0])


def wait_until(done: Callable[[], bool], deadline: float, interval: float = 0.5) -> bool:
    """Poll `done` until it is true or `deadline` (a time.time()) has passed; whether it came true."""
    while not done():
        if time.time() >= deadline:
            return False
        time.sleep(interval)
    return True


def scenario_events(database: Path, job_ids: Iterable[int], kinds: Iterable[str]) -> list[dict]:
    """The events of `kinds` about `job_ids` in the event log at `database`, oldest first."""
    jobs, wanted = set(job_ids), set(kinds)
    store = Store(database)
    try:
        rows = [e for e in store.events(limit=500) if e.job_id in jobs and e.kind in wanted]
    finally:
        store.close()
    return [{"kind": e.kind, "job": e.job_id, "detail": e.detail, "data": e.data, "at": e.at} for e in reversed(rows)]


def first_event(events: list[dict], kind: str) -> dict | None:
    """The oldest of `events` (as `scenario_events` gives them) of `kind`; None when there is none."""
    return next((e for e in events if e["kind"] == kind), None)


def excluded_by(events: list[dict], kind: str) -> list[str]:
    """The nodes the first `kind` event excluded the job from (none without such an event)."""
    event = first_event(events, kind)
    return list(event["data"].get("excluded", [])) if event else []


def echo_outcome(outcome: Outcome, as_json: bool, *, header: str, summary: str, failure: str) -> None:
    """Print a scenario's outcome (as JSON, or `header`, its events and `summary`); a
    ClickException with `failure` when it did not go as it should."""
    if as_json:
        click.echo(json.dumps(outcome.to_dict(), indent=2))
    else:
        click.echo(header)
        width = max((len(e["kind"]) for e in outcome.events), default=0)
        for e in outcome.events:
            click.echo(f"  {e['kind']:<{width}} job {e['job']}: {e['detail']}")
        click.echo(summary)
    if not outcome.ok:
        raise click.ClickException(failure)
