"""The packer's SQLite store: run history, pairs to keep apart, measured pair speeds,
remembered sizes, events (and the tables of finished runs' memory curves, which
`store.curves` reads and writes).

One file, WAL mode, schema versioned with ``PRAGMA user_version``. sqlite-utils does the
table work; nothing here knows about Slurm. Every method is safe to call from several
processes at once (SQLite's locking, a busy timeout).
"""
from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import sqlite_utils

from packer.decision import LOWER_BOUND_SOURCE, Estimate
from store.pairs import PairTables

log = logging.getLogger(__name__)

SCHEMA_VERSION = 10


@dataclass(frozen=True)
class RunRecord:
    """One finished run of a workload, as observed."""

    job_id: int
    fingerprint: str
    peak_mem_bytes: int
    mean_util_pct: float | None = None
    throughput: float | None = None
    user: str = ""
    name: str = ""
    ended_at: float = 0.0
    source: str = "observed"
    started_at: float = 0.0  # when this run began (0: unknown); a requeued job's next run is a new run
    # the workload needed at least peak_mem_bytes: the run did not complete, or its samples
    # have a gap (`packer.run_truth`); never taken for the workload's size
    lower_bound: bool = False
    end_state: str = ""  # why it is what it is: "completed", "cancelled", "gaps 40s without samples"
    # what the job needed: its framework allocator's own peak of allocated bytes (PyTorch's
    # ``max_memory_allocated``, through `TorchProbe.report`), never above what NVML saw; None:
    # not known (sizing then uses peak_mem_bytes, NVML's figure, reserve and all)
    need_bytes: int | None = None
    # the run held its GPU and never used any of it (no process, no byte, sampled from start to end
    # and completed): a measurement of 0 bytes, 0 %
    untouched: bool = False


class UnmeasuredRun(ValueError):
    """A run with no GPU memory measured: it would teach the packer a 0-byte job."""


@dataclass(frozen=True)
class Event:
    job_id: int | None
    kind: str  # decision, requeue-contention, restart-memory, mig-reconfigure, ...
    detail: str
    at: float
    data: dict


def _migrate_to_1(db: sqlite_utils.Database) -> None:
    db["runs"].create(
        {
            "id": int, "job_id": int, "fingerprint": str, "user": str, "name": str,
            "peak_mem_bytes": int, "mean_util_pct": float, "throughput": float,
            "ended_at": float, "source": str,
        },
        pk="id",
        not_null={"fingerprint", "peak_mem_bytes"},
    )
    db["runs"].create_index(["fingerprint", "ended_at"])
    db["runs"].create_index(["job_id", "fingerprint"], unique=True)
    db["avoid_pairs"].create(
        {"fp_a": str, "fp_b": str, "reason": str, "created_at": float}, pk=("fp_a", "fp_b")
    )
    db["sizes"].create({"fingerprint": str, "min_shards": int, "reason": str, "updated_at": float}, pk="fingerprint")
    db["events"].create(
        {"id": int, "job_id": int, "kind": str, "detail": str, "at": float, "data": str}, pk="id"
    )
    db["events"].create_index(["at"])


def _migrate_to_2(db: sqlite_utils.Database) -> None:
    """One row per run, not per job: a requeued job's next run is a run of its own."""
    db["runs"].add_column("started_at", float, not_null_default=0.0)
    db.execute("drop index if exists idx_runs_job_id_fingerprint")
    db.execute("create unique index idx_runs_job_run on runs (job_id, fingerprint, started_at)")


def _migrate_to_3(db: sqlite_utils.Database) -> None:
    """Measured pair speeds: workload a's speed beside workload b (ordered), the mean of
    ``samples`` measures (the contention watch's after / before of a senior)."""
    db["pair_speeds"].create(
        {"fp_a": str, "fp_b": str, "speed": float, "samples": int, "updated_at": float},
        pk=("fp_a", "fp_b"), not_null={"speed", "samples"},
    )


def _migrate_to_4(db: sqlite_utils.Database) -> None:
    """Memory curves of finished runs (`store.curves`), keyed like the runs; `points`
    is JSON, [[seconds since start, bytes in use, peak bytes], ...]."""
    db["run_curves"].create(
        {
            "job_id": int, "fingerprint": str, "started_at": float, "ended_at": float, "end_state": str,
            "node": str, "gpu_index": int, "isolation": str, "shards": int, "capacity_bytes": float,
            "capacity_label": str, "samples": int, "points": str,
        },
        pk=("job_id", "fingerprint", "started_at"), not_null={"ended_at", "points"},
    )
    db["run_curves"].create_index(["fingerprint", "ended_at"])
    db["run_curves"].create_index(["job_id", "ended_at"])


def _migrate_to_5(db: sqlite_utils.Database) -> None:
    """Runs that did not tell the whole truth (failed, cancelled, requeued, gaps in their
    samples) are lower bounds, kept apart from measurements (`packer.run_truth`)."""
    db["runs"].add_column("lower_bound", int, not_null_default=0)
    db["runs"].add_column("end_state", str, not_null_default="")
    db.execute("create index if not exists idx_runs_fp_bound_ended on runs (fingerprint, lower_bound, ended_at)")


def _migrate_to_6(db: sqlite_utils.Database) -> None:
    """The controller's copy of the agents' slice journals (`helper.journal_mirror`): which run of
    which job holds which MIG slice of a node; `assignment` is the agent's record, JSON."""
    db["slice_journal"].create(
        {"node": str, "uuid": str, "job_id": int, "run": float, "assignment": str, "first_seen": float,
         "last_seen": float, "released_at": float},
        pk=("node", "uuid", "job_id", "run"), not_null={"assignment", "first_seen", "last_seen"},
    )
    db["slice_journal"].create_index(["node", "released_at"])


def _migrate_to_7(db: sqlite_utils.Database) -> None:
    """Requeued jobs lifted to the head of the queue (`store.lifts`): the nice they were given,
    their owner's (put back when they start) and their restart count when lifted."""
    db["head_lifts"].create(
        {"job_id": int, "restart_cnt": int, "own_nice": int, "nice": int, "lifted_at": float},
        pk="job_id", not_null={"own_nice", "nice", "lifted_at"},
    )


def _migrate_to_8(db: sqlite_utils.Database) -> None:
    """What a run needed beside what NVML saw (`need_bytes`: its allocator's peak of allocated
    bytes, NULL when not known), and runs that held a GPU without touching it (`untouched`)."""
    db["runs"].add_column("need_bytes", int)
    db["runs"].add_column("untouched", int, not_null_default=0)


def _migrate_to_9(db: sqlite_utils.Database) -> None:
    """The looser levels' keys of each recorded workload and each level's guesses
    (`store.levels`: history that survives real edits). Idempotent (``if_not_exists``), so it
    is safe under whichever schema number it lands."""
    db["workload_keys"].create({"fingerprint": str, "user": str, "variant_key": str, "command_key": str,
                                "seen_at": float}, pk="fingerprint", not_null={"user", "seen_at"},
                               if_not_exists=True)
    db["workload_keys"].create_index(["variant_key"], if_not_exists=True)
    db["workload_keys"].create_index(["command_key"], if_not_exists=True)
    db["workload_keys"].create_index(["user", "seen_at"], if_not_exists=True)
    db["level_guesses"].create({"level": str, "key": str, "user": str, "wrong": int, "right": int,
                                "updated_at": float}, pk=("level", "key"),
                               not_null={"user", "wrong", "right", "updated_at"}, if_not_exists=True)
    db["level_guesses"].create_index(["user", "updated_at"], if_not_exists=True)


def _migrate_to_10(db: sqlite_utils.Database) -> None:
    """Each job's workload identity, kept by job id from the first time the watcher sees the job
    (`store.identities`): the end of its runs reads it here, never its AdminComment or its batch
    script again; a requeued job keeps its row. Idempotent (``if_not_exists``)."""
    db["job_identities"].create({"job_id": int, "fingerprint": str, "user": str, "name": str, "level": str,
                                 "noted_at": float}, pk="job_id",
                                not_null={"fingerprint", "user", "name", "noted_at"}, if_not_exists=True)
    db["job_identities"].create_index(["noted_at"], if_not_exists=True)


MIGRATIONS = {1: _migrate_to_1, 2: _migrate_to_2, 3: _migrate_to_3, 4: _migrate_to_4, 5: _migrate_to_5,
              6: _migrate_to_6, 7: _migrate_to_7, 8: _migrate_to_8, 9: _migrate_to_9, 10: _migrate_to_10}

RUN_COLUMNS = tuple(RunRecord.__dataclass_fields__)


def _run(row: dict) -> RunRecord:
    values = {k: v for k, v in row.items() if k != "id"}
    values["lower_bound"] = bool(values.get("lower_bound"))
    values["untouched"] = bool(values.get("untouched"))
    return RunRecord(**values)


def _estimate(measured: list[tuple[int, float | None]], bounds: list[tuple[int, float | None]]) -> Estimate | None:
    """The estimate from recent measured runs and recent lower bounds, (peak, util) each."""
    bound = max((peak for peak, _ in bounds), default=0)
    if not measured:
        if not bounds:
            return None
        return Estimate(peak_mem_bytes=bound, mean_util_pct=None, runs=len(bounds), source=LOWER_BOUND_SOURCE,
                        lower_bound_bytes=bound)
    peak = max(p for p, _ in measured)
    utils = [u for _, u in measured if u is not None]
    return Estimate(peak_mem_bytes=max(peak, bound), mean_util_pct=sum(utils) / len(utils) if utils else None,
                    runs=len(measured), lower_bound_bytes=bound if bound > peak else 0)


class StoreError(RuntimeError):
    """The history database cannot be opened or written; the message says where and why."""


class Store:
    """History, pair avoidance, remembered sizes and the event log, in one SQLite file."""

    def __init__(self, path: str | Path | None = None):
        self.path = str(path) if path is not None else ":memory:"
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=5.0, check_same_thread=False, isolation_level=None)
            self.db = sqlite_utils.Database(conn)
            if self.path != ":memory:":
                self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA busy_timeout=5000")
            self._migrate()
            self.pairs = PairTables(self.db)  # pairs to keep apart, measured pair speeds
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the gpupack database {self.path}: {exc}") from exc

    def _migrate(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        for target in sorted(v for v in MIGRATIONS if v > version):
            with self.db.conn:
                MIGRATIONS[target](self.db)
                self.db.execute(f"PRAGMA user_version={int(target)}")
            log.info("migrated %s to schema %d", self.path, target)

    # -- history -------------------------------------------------------------------------
    def record_run(self, run: RunRecord, event: tuple[str, str, dict] | None = None) -> bool:
        """Add one run to the history; True when it is new, False when it was recorded already.

        A run is (job, fingerprint, start): every path that saw it end (the monitor, the
        controller's epilog, the sweep of the agents' final summaries) records it, and the
        later ones merge into the first's row (the larger peak, the figures it has). It stays a
        lower bound only if every record of it is one: a record that saw the whole run (no gap
        in its samples) makes it a measurement. Its end is the earliest any record gives (a
        later record does not make an old run recent again). ``event`` (kind, detail, data) is logged in the
        same transaction, only when the run is new. A run with no memory measured is refused
        (`UnmeasuredRun`)."""
        if run.peak_mem_bytes < 0:
            raise ValueError(f"job {run.job_id}: peak memory cannot be negative")
        if run.peak_mem_bytes == 0 and not (run.untouched and not run.lower_bound):
            raise UnmeasuredRun(f"job {run.job_id}: no GPU memory measured; a run without a peak is not history "
                                "(unless it completed untouched, sampled from start to end)")
        if run.untouched and run.peak_mem_bytes:
            raise ValueError(f"job {run.job_id}: an untouched run has no memory, not {run.peak_mem_bytes} bytes")
        if run.need_bytes is not None and not 0 <= run.need_bytes <= run.peak_mem_bytes:
            raise ValueError(f"job {run.job_id}: need {run.need_bytes} bytes is not within [0, the NVML peak "
                             f"{run.peak_mem_bytes}]")
        if run.mean_util_pct is not None and not 0 <= run.mean_util_pct <= 100:
            raise ValueError(f"job {run.job_id}: utilisation {run.mean_util_pct} is not a percentage")
        row = asdict(run)
        row["ended_at"] = run.ended_at or time.time()
        row["lower_bound"] = int(run.lower_bound)
        row["untouched"] = int(run.untouched)
        names = ", ".join(RUN_COLUMNS)
        conn = self.db.conn
        conn.execute("begin immediate")
        try:
            known = conn.execute(
                "select 1 from runs where job_id = ? and fingerprint = ? and started_at = ?",
                [run.job_id, run.fingerprint, run.started_at],
            ).fetchone() is not None
            conn.execute(
                f"insert into runs ({names}) values ({', '.join(':' + c for c in RUN_COLUMNS)}) "
                "on conflict (job_id, fingerprint, started_at) do update set "
                "peak_mem_bytes = max(peak_mem_bytes, excluded.peak_mem_bytes), "
                "need_bytes = case when need_bytes is null then excluded.need_bytes "
                "when excluded.need_bytes is null then need_bytes else max(need_bytes, excluded.need_bytes) end, "
                "untouched = min(untouched, excluded.untouched), "
                "mean_util_pct = coalesce(excluded.mean_util_pct, mean_util_pct), "
                "throughput = coalesce(excluded.throughput, throughput), "
                "user = coalesce(nullif(excluded.user, ''), user), name = coalesce(nullif(excluded.name, ''), name), "
                "ended_at = min(ended_at, excluded.ended_at), "
                "end_state = case when lower_bound and not excluded.lower_bound then excluded.end_state "
                "else coalesce(nullif(end_state, ''), excluded.end_state) end, "
                "lower_bound = min(lower_bound, excluded.lower_bound)",
                row,
            )
            if event is not None and not known:
                kind, detail, data = event
                self._insert_event(kind, detail, run.job_id, data)
            conn.execute("commit")
        except BaseException:
            conn.execute("rollback")
            raise
        return not known

    def run_of(self, job_id: int, started_at: float) -> RunRecord | None:
        """The recorded run of `job_id` that began at `started_at` (whatever its fingerprint)."""
        rows = list(self.db["runs"].rows_where("job_id = ? and started_at = ?", [job_id, started_at], limit=1))
        return _run(rows[0]) if rows else None

    def runs(self, fingerprint: str | None = None, limit: int = 100) -> list[RunRecord]:
        where, args = ("fingerprint = ?", [fingerprint]) if fingerprint else (None, [])
        rows = self.db["runs"].rows_where(where, args, order_by="ended_at desc", limit=limit)
        return [_run(r) for r in rows]

    def estimate(self, fingerprint: str, window: int = 5) -> Estimate | None:
        """Recent peak (max of the last `window` runs) and mean utilisation."""
        return self.history(fingerprint, window)[0]

    def history(self, fingerprint: str, window: int = 5, since: float = 0.0) -> tuple[Estimate | None, int | None]:
        """`estimate` and `remembered_size` together, in one statement (one read
        transaction, indexed): the submit path asks for both on every candidate job.

        The estimate is the largest peak of the last `window` measured runs, raised to the
        largest of the last `window` lower bounds (`packer.run_truth`): a run that reached
        6 GiB before it failed means the next run needs more than 6 GiB, whatever an older
        completed run measured. A workload with lower bounds only has no measurement: its
        estimate says so (`source` "lower-bound") and the packer treats it as unknown.
        Runs ended before `since` (a time) are not looked at (`[packer] history_max_age_days`).
        A measured run's peak is what it needed where that is known (`RunRecord.need_bytes`, its
        allocator's allocated peak), else NVML's figure; an untouched run's is 0."""
        rows = self.db.conn.execute(
            "select 0, min_shards, null from sizes where fingerprint = ?1 "
            "union all select * from (select 1, coalesce(need_bytes, peak_mem_bytes), mean_util_pct from runs "
            "where fingerprint = ?1 and lower_bound = 0 and ended_at >= ?3 order by ended_at desc limit ?2) "
            "union all select * from (select 2, peak_mem_bytes, mean_util_pct from runs "
            "where fingerprint = ?1 and lower_bound = 1 and ended_at >= ?3 order by ended_at desc limit ?2)",
            [fingerprint, int(window), float(since)],
        ).fetchall()
        remembered = next((row[1] for row in rows if row[0] == 0), None)
        return _estimate([r[1:] for r in rows if r[0] == 1], [r[1:] for r in rows if r[0] == 2]), remembered

    def estimates(self, fingerprints: Iterable[str], window: int = 5, since: float = 0.0) -> dict[str, Estimate]:
        """`estimate` of many fingerprints in one statement (the steering's pair knowledge
        asks for every job it weighs each round); a fingerprint with no run is left out."""
        wanted = sorted(set(fingerprints))
        if not wanted:
            return {}
        rows = self.db.execute(
            "select fingerprint, lower_bound, peak, mean_util_pct from ("
            "select fingerprint, lower_bound, case when lower_bound then peak_mem_bytes "
            "else coalesce(need_bytes, peak_mem_bytes) end as peak, mean_util_pct, row_number() over "
            "(partition by fingerprint, lower_bound order by ended_at desc) as n from runs "
            "where fingerprint in (select value from json_each(?1)) and ended_at >= ?3) where n <= ?2",
            [json.dumps(wanted), int(window), float(since)],
        ).fetchall()
        grouped: dict[str, tuple[list, list]] = {}
        for fp, bound, peak, util in rows:
            grouped.setdefault(fp, ([], []))[1 if bound else 0].append((peak, util))
        out = {fp: _estimate(measured, bounds) for fp, (measured, bounds) in grouped.items()}
        return {fp: est for fp, est in out.items() if est is not None}

    # -- remembered sizes (a job restarted for memory keeps its larger size) -------------
    def remember_size(self, fingerprint: str, min_shards: int, reason: str) -> None:
        self.db["sizes"].insert(
            {"fingerprint": fingerprint, "min_shards": min_shards, "reason": reason, "updated_at": time.time()},
            replace=True,
        )

    def remembered_size(self, fingerprint: str) -> int | None:
        row = self.db.conn.execute("select min_shards from sizes where fingerprint = ?", [fingerprint]).fetchone()
        return row[0] if row else None

    def mean_run_s(self, fingerprint: str, window: int = 5, since: float = 0.0) -> float | None:
        """The mean length of the workload's last ``window`` completed runs (measured, with a
        start time) ended after ``since``; None without one."""
        row = self.db.execute(
            "select avg(ended_at - started_at) from (select started_at, ended_at from runs "
            "where fingerprint = ? and lower_bound = 0 and started_at > 0 and ended_at >= ? "
            "order by ended_at desc limit ?)", [fingerprint, since, int(window)]).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    # -- event log ---------------------------------------------------------------------
    def log_event(self, kind: str, detail: str, job_id: int | None = None, **data: object) -> None:
        self._insert_event(kind, detail, job_id, data)

    def _insert_event(self, kind: str, detail: str, job_id: int | None, data: dict) -> None:
        self.db.conn.execute("insert into events (job_id, kind, detail, at, data) values (?, ?, ?, ?, ?)",
                             [job_id, kind, detail, time.time(), json.dumps(data)])

    def events(self, limit: int = 200, job_id: int | None = None) -> list[Event]:
        where, args = ("job_id = ?", [job_id]) if job_id is not None else (None, [])
        rows = self.db["events"].rows_where(where, args, order_by="id desc", limit=limit)
        return [
            Event(job_id=r["job_id"], kind=r["kind"], detail=r["detail"], at=r["at"], data=json.loads(r["data"] or "{}"))
            for r in rows
        ]

    def events_after(self, last_id: int, conn: sqlite3.Connection | None = None) -> list[tuple[int, str, str, str]]:
        """(id, kind, detail, data as JSON text) of every event after row ``last_id``, oldest
        first, read on ``conn`` (a reader of its own, `reader()`) or the store's own."""
        return (conn or self.db.conn).execute(
            "select id, kind, detail, data from events where id > ? order by id", [last_id]).fetchall()

    def reader(self) -> sqlite3.Connection:
        """A read connection of its own (for other threads), or the store's own in memory."""
        if self.path == ":memory:":
            return self.db.conn
        return sqlite3.connect(self.path, timeout=5.0, check_same_thread=False)

    def counts(self, *tables: str) -> dict[str, int]:
        """Rows in each of ``tables``."""
        return {t: self.db[t].count for t in tables}

    def close(self) -> None:
        self.db.conn.close()
