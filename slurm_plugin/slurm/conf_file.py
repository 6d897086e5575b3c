"""What the suite reads from slurm.conf itself: its settings line by line, and the few values
the helper needs before any Slurm command has run (ports, JobRequeue)."""
from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def conf_settings(text: str) -> list[dict[str, str]]:
    """slurm.conf as one dict per line (keys lower-case), comments dropped. `Include` lines
    are not followed."""
    lines = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pairs = {}
        for word in line.split():
            if "=" in word:
                key, value = word.split("=", 1)
                pairs[key.lower()] = value
        lines.append(pairs)
    return lines


def job_requeue(text: str) -> bool:
    """slurm.conf's JobRequeue: whether a batch job that names neither --requeue nor
    --no-requeue may be requeued (Slurm's default: 1). A value other than 0 or 1 is
    named in the log and read as Slurm's default."""
    value = None
    for pairs in conf_settings(text):
        value = pairs.get("jobrequeue", value)
    if value is None:
        return True
    if value.strip() not in ("0", "1"):
        log.warning("slurm.conf: JobRequeue=%s is neither 0 nor 1; reading it as Slurm's default, 1", value)
        return True
    return value.strip() == "1"


def job_requeue_of(conf: Path) -> bool:
    """`job_requeue` of the file at `conf`; Slurm's default when it cannot be read (logged)."""
    try:
        return job_requeue(conf.read_text())
    except OSError as exc:
        log.warning("cannot read %s (%s): jobs that name no --requeue are taken as requeueable, "
                    "Slurm's default", conf, exc)
        return True
