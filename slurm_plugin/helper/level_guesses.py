"""The history levels' keys and guesses, kept by the helper (the store's one writer).

- :func:`note_run`: a run just recorded under its exact fingerprint gets its looser levels'
  keys (``store.levels.workload_keys``; the batch script is read from Slurm once per new
  fingerprint), so later variants find it; a run that a looser level sized (``lvl=variant``
  or ``lvl=command`` in its AdminComment) and that completed as a measurement is a right
  guess of that level;
- :func:`note_wrong_guess`: a job a looser level sized that restart-oom requeued (it ran out
  of memory) or a memory-forecast restart moved (enforced) is a wrong guess of that level
  (``packer.history_levels`` demotes a level that guesses wrong often).
"""
from __future__ import annotations

import logging

from packer.comment import parse
from packer.workload_identity import COMMAND, VARIANT, WorkloadKeys, workload_keys
from store.db import Store
from store.levels import LevelStore
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.model import Job

log = logging.getLogger(__name__)

LOOSER = (VARIANT, COMMAND)
WRONG_EVENT = "level-guess-wrong"


def deciding_level(job: Job | None) -> str | None:
    """The looser level whose history sized ``job`` (its AdminComment's ``lvl=``), if any."""
    record = parse(job.admin_comment) if job is not None else None
    level = record.fields.get("lvl") if record is not None else None
    return level if level in LOOSER else None


def keys_of(levels: LevelStore, runner, job: Job, fingerprint: str) -> WorkloadKeys | None:
    """The keys of ``fingerprint``'s levels: the store's, else from the job's batch script
    (None when Slurm cannot give it)."""
    known = levels.keys_of(fingerprint)
    if known is not None:
        return known
    try:
        script = runner.batch_script(job.job_id)
    except SlurmError as exc:
        log.info("job %d: its batch script cannot be read (%s): its history has its exact level only",
                 job.job_id, exc)
        return None
    keys = workload_keys(job.user or "", job.name or "", script)
    return WorkloadKeys(fingerprint, keys.variant, keys.command)  # the exact key is the one it travels with


def note_keys(store: Store, runner, job: Job, fingerprint: str, user: str) -> None:
    """Keep the looser levels' keys of ``fingerprint`` (its batch script read from Slurm only
    when the store has none for it yet)."""
    levels = LevelStore(store)
    if levels.keys_of(fingerprint) is not None:
        return
    keys = keys_of(levels, runner, job, fingerprint)
    if keys is not None:
        levels.remember_keys(keys, user)


def note_run(store: Store, runner, job: Job | None, fingerprint: str, user: str, measured: bool, new: bool,
             level: str | None = None) -> None:
    """Keep the recorded run's levels' keys; count a right guess of the level that sized it
    (``level``: the one its identity carries, `store.identities`; None: read from ``job``)."""
    if job is None:
        return
    levels = LevelStore(store)
    keys = keys_of(levels, runner, job, fingerprint)
    if keys is None:
        return
    levels.remember_keys(keys, user)
    level = (level if level in LOOSER else None) if level is not None else deciding_level(job)
    key = keys.key(level) if level is not None else None
    if key is not None and measured and new:
        levels.count_guess(level, key, user, wrong=False)


def note_wrong_guess(store: Store, runner, job: Job, fingerprint: str | None, kind: str) -> None:
    """Count a wrong guess of the looser level that sized ``job`` (nothing when none did)."""
    level = deciding_level(job)
    if level is None or not fingerprint:
        return
    levels = LevelStore(store)
    keys = keys_of(levels, runner, job, fingerprint)
    key = keys.key(level) if keys is not None else None
    if key is None:
        return
    wrong, right = levels.count_guess(level, key, job.user or "", wrong=True)
    store.log_event(WRONG_EVENT, f"the {level} level sized job {job.job_id} wrong ({kind}): {wrong} wrong, "
                    f"{right} right for its workload", job.job_id, level=level, key=key, action=kind, wrong=wrong,
                    right=right, fingerprint=fingerprint)
