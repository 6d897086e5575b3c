"""Each job's workload identity, kept by job id (`job_identities`, schema 10).

The submit side cannot key anything by job id (slurmctld gives the id after job_submit.lua
returns), so the identity travels in the job's AdminComment (`fp=`, `lvl=`: written by the
shim from the helper's answer; only an administrator or SlurmUser can set it). The watcher
reads it once, the first time it sees the job, and keeps it here; the end of every run of the
job (a requeued job keeps its id and its row) reads it here, never the AdminComment or the
batch script again. Rows older than the retention horizon, or beyond its newest rows, are
deleted (`JobIdentities.prune`): the table holds recent jobs, not every job ever.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from store.db import Store

TABLE = "job_identities"


@dataclass(frozen=True)
class JobIdentity:
    """A job's workload: its fingerprint, the user and name it was made from, and the looser
    history level that sized it ("" when its own history, or none, did; None: not known)."""

    job_id: int
    fingerprint: str
    user: str = ""
    name: str = ""
    level: str | None = ""


class JobIdentities:
    """The `job_identities` table: written once per job (the first identity noted wins: a
    later AdminComment edit does not change what the job's runs are recorded under)."""

    def __init__(self, store: Store):
        self.store = store

    def note(self, identity: JobIdentity, at: float | None = None) -> bool:
        """Keep ``identity`` unless its job has one already; True when it is new."""
        if identity.job_id <= 0 or not identity.fingerprint:
            raise ValueError(f"job {identity.job_id}: an identity needs a job id and a fingerprint")
        cursor = self.store.db.execute(
            f"insert into {TABLE} (job_id, fingerprint, user, name, level, noted_at) values (?, ?, ?, ?, ?, ?) "
            "on conflict (job_id) do nothing",
            [identity.job_id, identity.fingerprint, identity.user, identity.name, identity.level or "",
             time.time() if at is None else at])
        return cursor.rowcount == 1

    def of(self, job_id: int) -> JobIdentity | None:
        row = self.store.db.execute(f"select job_id, fingerprint, user, name, level from {TABLE} where job_id = ?",
                                    [job_id]).fetchone()
        return JobIdentity(row[0], row[1], row[2], row[3], row[4] or "") if row else None

    def prune(self, before: float, max_rows: int | None = None) -> int:
        """Delete the identities noted before ``before``, and beyond the newest ``max_rows``;
        rows deleted."""
        with self.store.db.conn:
            deleted = self.store.db.execute(f"delete from {TABLE} where noted_at < ?", [before]).rowcount
            if max_rows is not None:
                deleted += self.store.db.execute(
                    f"delete from {TABLE} where job_id in (select job_id from {TABLE} "
                    "order by noted_at desc, job_id desc limit -1 offset ?)", [max_rows]).rowcount
        return deleted
